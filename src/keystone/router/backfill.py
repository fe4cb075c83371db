"""A backfill: one output's events of a time range routed again from the stream's archive, as a
Spark application of its own beside the live router (`python -m keystone.router.backfill`,
started and watched by control's fleet).

The seeds' "just switch the source": the archive's records (`router.archive.archive_records`)
go through the same `envelope()`, the same compiled filter and projection (`routed`) and the
same sink classes as the live output, with the output's spec as it is now, every record marked
as a replay of the backfill. Dead letters go to the stream's dead-letter topic as live.

It goes hour by hour through the hours the archive has in the range, each hour in slices of at
most `SLICE_SECONDS` of the backfill's rate, paced to that rate. Elasticsearch and Kafka take
each slice as it comes; Hive stages them and replaces the hour's rows of the range once all are
staged (`Writer.end_replay`), so an hour is never half replaced. After each slice it records
how far it has come (`BackfillProgress`), and a backfill started again goes on from there: an
hour under way starts again at its next slice.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import threading
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from keystone.contracts.errors import KeystoneError
from keystone.contracts.names import archive_table
from keystone.contracts.recovery import Backfill, BackfillProgress, HourDone
from keystone.contracts.registry import RegistryReader
from keystone.contracts.schema import parse_schema
from keystone.contracts.settings import Settings
from keystone.contracts.spec import OutputSpec, StreamSpec
from keystone.router.archive import archive_records, hour_start, partitions
from keystone.router.job import left_out, paths_read_by, routed
from keystone.router.meter import Meter
from keystone.router.sinks.base import writer_for
from keystone.router.sinks.hive import HiveTable
from keystone.router.sinks.route import Route
from keystone.router.source import envelope
from keystone.router.spark import (
    application_logging,
    end_session,
    spark_session,
    stop_on_signals,
)

log = logging.getLogger(__name__)

SLICE_SECONDS = 10  # a slice holds at most this many seconds' worth of the rate


def hours_of(spark: SparkSession, stream: str, start_ms: int, end_ms: int) -> list[tuple[int, int]]:
    """The archive's hours with events in [start_ms, end_ms), oldest first."""
    return [
        (d, h)
        for d, h in partitions(spark, HiveTable(archive_table(stream)).name)
        if hour_start(d, h) * 1000 < end_ms and (hour_start(d, h) + 3600) * 1000 > start_ms
    ]


class Backfiller:
    def __init__(
        self,
        spark: SparkSession,
        settings: Settings,
        spec: StreamSpec,
        output: OutputSpec,
        backfill: Backfill,
    ) -> None:
        self.spark = spark
        self.spec = spec
        self.output = output
        self.backfill = backfill
        self.path = BackfillProgress.path(settings.state_dir, spec.name, backfill.id)
        self.progress = BackfillProgress.load(self.path)
        self.meter = Meter(spark, f"backfill.{spec.name}.{output.name}")
        self.writer = writer_for(Route(settings, spec, output), self.meter)
        schema = spec.avro_schema
        self.schema = parse_schema(schema) if schema is not None else None
        self.paths = paths_read_by([output])

    def records(self, start_ms: int, end_ms: int) -> DataFrame:
        return archive_records(self.spark, self.spec.name, start_ms, end_ms)

    def run(self, stop: threading.Event) -> bool:
        """Goes on from where the progress file says until the range is done (True) or `stop`
        is set (False)."""
        backfill, progress = self.backfill, self.progress
        self.writer.prepare(self.spark)
        if progress.total is None:
            progress.total = self.records(backfill.start, backfill.end).count()
            progress.save(self.path)
        for dateint, hour in hours_of(self.spark, self.spec.name, backfill.start, backfill.end):
            begins = int(hour_start(dateint, hour) * 1000)
            window = (max(backfill.start, begins), min(backfill.end, begins + 3_600_000))
            if not self.hour(f"{dateint}{hour:02d}", window, stop):
                return False
        progress.done = True
        progress.save(self.path)
        log.info(
            "backfill %s done: %d events read, %d delivered, %d dead-lettered",
            backfill.id,
            progress.read,
            progress.delivered,
            progress.dead_lettered,
        )
        return True

    def hour(self, key: str, window: tuple[int, int], stop: threading.Event) -> bool:
        """One hour's `window`, slice by slice at the backfill's rate; False if stopped."""
        backfill, progress = self.backfill, self.progress
        done = progress.hours.get(key)
        if done is None:
            done = HourDone(events=self.records(*window).count())
        if done.done:
            return True
        slices = max(1, math.ceil(done.events / (backfill.rate * SLICE_SECONDS)))
        tags = [f"{backfill.id}-{key}-{n}" for n in range(slices)]
        records = self.records(*window)
        # A slice: the records whose hash of their place in Kafka falls in it, the same each
        # time the hour is read.
        place = F.pmod(F.xxhash64("partition", "offset"), F.lit(slices))
        for n in range(done.slices, slices):
            if stop.is_set():
                self.writer.end_replay(self.spark, window, tags, keep=False)
                return False
            began = time.monotonic()
            source = envelope(records.where(place == n), self.schema, self.paths)
            frame = routed(source, self.output, self.meter, F.lit(backfill.id))
            outcome = self.writer.write_replay(frame, tags[n], left_out(source, self.output))
            counts = self.meter.take()
            delivered = outcome.delivered if outcome is not None else counts.delivered
            dead = outcome.dead_lettered if outcome is not None else counts.dead_lettered
            removed = outcome.removed if outcome is not None else 0
            done = done.model_copy(
                update={
                    "slices": n + 1,
                    "read": done.read + counts.read,
                    "delivered": done.delivered + delivered,
                    "dead_lettered": done.dead_lettered + dead,
                    "removed": done.removed + removed,
                }
            )
            progress.hours[key] = done
            progress.save(self.path)
            # Paced: a slice of `read` events takes at least read / rate seconds.
            stop.wait(max(0.0, counts.read / backfill.rate - (time.monotonic() - began)))
        self.writer.end_replay(self.spark, window, tags, keep=True)
        progress.hours[key] = done.model_copy(update={"done": True})
        progress.save(self.path)
        log.info("backfill %s: hour %s done (%d events)", backfill.id, key, done.events)
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m keystone.router.backfill", description=__doc__)
    parser.add_argument("--stream", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--id", required=True, help="the backfill's id (bf-...)")
    args = parser.parse_args(argv)
    application_logging()
    settings = Settings()
    registry = RegistryReader.connect(settings)
    try:
        spec = registry.get_stream(args.stream)
        backfill = registry.backfills(args.stream).get(args.output)
    except KeystoneError as e:
        log.error("%s", e.message)
        return 2
    finally:
        registry.close()
    output = spec.output(args.output)
    if backfill is None or backfill.id != args.id or output is None:
        log.error("backfill %s of %s.%s is no longer asked for", args.id, args.stream, args.output)
        return 2

    stop = stop_on_signals()
    name = f"keystone-backfill-{spec.name}-{output.name}"
    spark = spark_session(settings, name)
    log.info(
        "backfill %s of %s.%s: %s to %s at %d events/s",
        backfill.id,
        spec.name,
        output.name,
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(backfill.start / 1000)),
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(backfill.end / 1000)),
        backfill.rate,
    )
    try:
        finished = Backfiller(spark, settings, spec, output, backfill).run(stop)
    finally:
        end_session(spark)
    log.info("backfill %s %s", backfill.id, "finished" if finished else "stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
