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
hour under way starts again at its next slice (a Hive hour stopped on purpose, its staged
slices discarded, starts again from its first).

An output whose sink replaces the range whole (`Writer.replaces_ranges`: Hive) reads an hour
only once the live output and the archive have committed past every event ingested before the
window's end (`settled`): the archive then holds all of the window, and a live output still
behind it (after the redeploy of a fix, say) does not write some of its rows again after the
backfill replaced them. Until then the progress says what it waits for. Its swaps are
journaled (`HiveTable.replace_hour`); one an earlier backfill's application left halfway is
finished when the next starts (`Writer.settle_replays`).
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import threading
import time
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from keystone.contracts.checkpoints import Offsets, checkpoint_dir, generations, latest
from keystone.contracts.errors import KeystoneError, Unavailable
from keystone.contracts.names import ARCHIVE_QUERY, archive_table, fronting_topic
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
from keystone.router.topics import offsets_at

log = logging.getLogger(__name__)

SLICE_SECONDS = 10  # a slice holds at most this many seconds' worth of the rate
SETTLE_POLL_SECONDS = 2.0  # between two looks at the live output's position
SETTLE_SLACK_MS = 5_000  # the proxies' and this machine's clocks may be this far apart


def iso(epoch_ms: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_ms / 1000))


def settled(
    settings: Settings,
    stream: str,
    output: str,
    end_ms: int,
    now: float,
    at: Callable[[int], Offsets] | None = None,
) -> str:
    """'' once the output's live query and the stream's archive have committed past every
    event ingested before `end_ms`; else what is still waited for.

    The proxy stamps an event, then waits at most `kafka_ack_timeout_seconds` for room in its
    producer's queue and as long again for Kafka: an event stamped before `end_ms` that Kafka
    has is before the first record stamped `SETTLE_SLACK_MS` past twice that timeout after
    `end_ms` (the slack for clocks apart), in every partition (`at` finds it: Kafka's
    offsets-for-times).
    """
    settle_ms = end_ms + int(2 * settings.kafka_ack_timeout_seconds * 1000) + SETTLE_SLACK_MS
    if now * 1000 < settle_ms:
        return f"events ingested before {iso(end_ms)} to reach Kafka (until {iso(settle_ms)})"
    topic = fronting_topic(stream)
    needed = (at or (lambda ms: offsets_at(settings, topic, ms)))(settle_ms)
    live = generations(settings, stream, output)
    queries = {
        "the live output": checkpoint_dir(settings, stream, output, max(live, default=0)),
        "the archive": settings.checkpoints_dir / stream / ARCHIVE_QUERY,
    }
    for what, checkpoint in queries.items():
        committed = latest(checkpoint, topic)
        offsets = committed.offsets if committed is not None else {}
        if any(offsets.get(p, 0) < o for p, o in needed.items()):
            return f"{what} to pass the events ingested before {iso(end_ms)}"
    return ""


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
        key: bytes | None,
    ) -> None:
        """`key`: the stream's, for `hash` (`RegistryReader.hashing_key`)."""
        self.spark = spark
        self.key = key
        self.settings = settings
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
        self.writer.settle_replays(self.spark, keep=backfill.id)
        if progress.total is None:
            progress.total = self.records(backfill.start, backfill.end).count()
            progress.save(self.path)
        for dateint, hour in hours_of(self.spark, self.spec.name, backfill.start, backfill.end):
            begins = int(hour_start(dateint, hour) * 1000)
            window = (max(backfill.start, begins), min(backfill.end, begins + 3_600_000))
            if not self.hour(f"{dateint}{hour:02d}", window, stop):
                return False
        self.writer.settle_replays(self.spark, keep=None)
        progress.done = True
        progress.save(self.path)
        log.info(
            "backfill %s done: %d events read, %d delivered, %d dead-lettered, %d unreadable",
            backfill.id,
            progress.read,
            progress.delivered,
            progress.dead_lettered,
            progress.unreadable,
        )
        return True

    def hour(self, key: str, window: tuple[int, int], stop: threading.Event) -> bool:
        """One hour's `window`, slice by slice at the backfill's rate; False if stopped."""
        backfill, progress = self.backfill, self.progress
        done = progress.hours.get(key)
        if done is not None and done.done:
            return True
        # Before the hour is read: the archive then holds all of it, and the live output
        # writes none of its rows after they are replaced.
        if self.writer.replaces_ranges and not self.wait_until_settled(window[1], stop):
            return False  # what is staged stays: started again, it goes on from there
        if done is None:
            done = HourDone(events=self.records(*window).count())
        slices = max(1, math.ceil(done.events / (backfill.rate * SLICE_SECONDS)))
        tags = [f"{backfill.id}-{key}-{n}" for n in range(slices)]
        records = self.records(*window)
        # A slice: the records whose hash of their place in Kafka falls in it, the same each
        # time the hour is read.
        place = F.pmod(F.xxhash64("partition", "offset"), F.lit(slices))
        for n in range(done.slices, slices):
            if stop.is_set():
                return self.stopped(key, window, tags)
            began = time.monotonic()
            source = envelope(records.where(place == n), self.schema, self.paths)
            frame = routed(source, self.output, self.meter, F.lit(backfill.id), key=self.key)
            left = left_out(source, self.output, self.key)
            outcome = self.writer.write_replay(frame, tags[n], left)
            counts = self.meter.take_settled()
            # Counted, not dead-lettered: the archive keeps them for a backfill after the fix,
            # and a dead letter beside the live router's own (the stream's, for most) would be
            # sent twice by two redrives, or stay behind a cancelled backfill's unswapped hour.
            unreadable = source.where(F.col("problem").isNotNull()).count()
            delivered = outcome.delivered if outcome is not None else counts.delivered
            dead = outcome.dead_lettered if outcome is not None else counts.dead_lettered
            removed = outcome.removed if outcome is not None else 0
            done = done.model_copy(
                update={
                    "slices": n + 1,
                    "read": done.read + counts.read,
                    "delivered": done.delivered + delivered,
                    "dead_lettered": done.dead_lettered + dead,
                    "unreadable": done.unreadable + unreadable,
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

    def wait_until_settled(self, end_ms: int, stop: threading.Event) -> bool:
        """Until `settled` (True) or stopped (False), saying meanwhile what it waits for."""
        progress, said = self.progress, ""
        while not stop.is_set():
            try:
                waiting = settled(
                    self.settings, self.spec.name, self.output.name, end_ms, time.time()
                )
            except Unavailable as e:
                waiting = f"Kafka: {e.message}"
            if waiting != progress.waiting:
                progress.waiting = waiting
                progress.save(self.path)
            if not waiting:
                return True
            if waiting != said:
                log.info("backfill %s waits for %s", self.backfill.id, waiting)
                said = waiting
            stop.wait(SETTLE_POLL_SECONDS)
        return False

    def stopped(self, key: str, window: tuple[int, int], tags: list[str]) -> bool:
        """Stopped on purpose halfway through an hour: a sink that staged its slices discards
        them, and the hour starts again from its first slice next time."""
        self.writer.end_replay(self.spark, window, tags, keep=False)
        if self.writer.replaces_ranges:
            self.progress.hours.pop(key, None)
            self.progress.save(self.path)
        return False


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
        key = registry.hashing_key(args.stream)
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
        iso(backfill.start),
        iso(backfill.end),
        backfill.rate,
    )
    try:
        finished = Backfiller(spark, settings, spec, output, backfill, key).run(stop)
    finally:
        end_session(spark)
    log.info("backfill %s %s", backfill.id, "finished" if finished else "stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
