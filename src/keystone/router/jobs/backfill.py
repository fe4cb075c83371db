"""A backfill: one output's events of a time range routed again from the stream's archive, as a
job's application beside the live router (`keystone.router.jobs`).

The seeds' "just switch the source": the archive's records (`router.archive.archive_records`)
go through the same `envelope()`, the same compiled filter and projection (`routed`) and the
same sink classes as the live output, with the output's spec as it is now, every record marked
as a replay of the backfill. Dead letters go to the stream's dead-letter topic as live.

It goes hour by hour through the hours the archive has in the range, each hour in slices of at
most `SLICE_SECONDS` of the backfill's rate, paced to that rate. Elasticsearch and Kafka take
each slice as it comes; Hive stages them and replaces the hour's rows of the range once all are
staged (`ReplacesRanges.end_replay`), so an hour is never half replaced. After each slice it records
how far it has come (`BackfillProgress`), and a backfill started again goes on from there: an
hour under way starts again at its next slice (a Hive hour stopped on purpose, its staged
slices discarded, starts again from its first).

An output whose sink replaces the range whole (`ReplacesRanges`: Hive) reads an hour
only once the live output and the archive have committed past every event ingested before the
window's end (`settled`): the archive then holds all of the window, and a live output still
behind it (after the redeploy of a fix, say) does not write some of its rows again after the
backfill replaced them. Until then the progress says what it waits for. Its swaps are
journaled (`HiveTable.replace_hour`); one an earlier backfill's application left halfway is
finished when the next starts (`ReplacesRanges.settle_replays`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from keystone.contracts import fronting
from keystone.contracts.checkpoints import Offsets, checkpoint_dir, generations, latest
from keystone.contracts.errors import Unavailable
from keystone.contracts.fronting import FrontingCluster, query_key
from keystone.contracts.names import archive_table, fronting_topic
from keystone.contracts.recovery import Backfill, BackfillProgress, HourDone
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.router.archive import archive_checkpoint, archive_records, hour_start, partitions
from keystone.router.job import left_out, paths_read_by, routed
from keystone.router.jobs import SLICE_SECONDS, JobRunner
from keystone.router.meter import Meter
from keystone.router.sinks.base import ReplacesRanges, TakesOut, replayer_for
from keystone.router.sinks.hive.table import HiveTable
from keystone.router.sinks.route import Route
from keystone.router.source import envelope
from keystone.router.topics import offsets_at

log = logging.getLogger(__name__)

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
    at: Callable[[str, int], Offsets] | None = None,
) -> str:
    """'' once the output's live queries and the stream's archive have committed past every
    event ingested before `end_ms`, on every fronting cluster; else what is still waited for.

    The proxy stamps an event, then waits at most `kafka_ack_timeout_seconds` for room in its
    producer's queue and as long again for Kafka: an event stamped before `end_ms` that Kafka
    has is before the first record stamped `SETTLE_SLACK_MS` past twice that timeout after
    `end_ms` (the slack for clocks apart), in every partition (`at(cluster, ms)` finds it:
    Kafka's offsets-for-times on that cluster).
    """
    settle_ms = end_ms + int(2 * settings.kafka_ack_timeout_seconds * 1000) + SETTLE_SLACK_MS
    if now * 1000 < settle_ms:
        return f"events ingested before {iso(end_ms)} to reach Kafka (until {iso(settle_ms)})"
    topic = fronting_topic(stream)

    def offsets(cluster: FrontingCluster, ms: int) -> Offsets:
        return offsets_at(cluster.connect(settings), topic, ms)

    for cluster in fronting.clusters(settings):
        on = "" if cluster.home else f" on {cluster.name}"
        needed = at(cluster.name, settle_ms) if at is not None else offsets(cluster, settle_ms)
        key = query_key(output, cluster)
        live = generations(settings, stream, key)
        queries = {
            f"the live output{on}": checkpoint_dir(settings, stream, key, max(live, default=0)),
            f"the archive{on}": archive_checkpoint(settings, stream, cluster),
        }
        for what, checkpoint in queries.items():
            committed = latest(checkpoint, topic)
            held = committed.offsets if committed is not None else {}
            if any(held.get(p, 0) < o for p, o in needed.items()):
                return f"{what} to pass the events ingested before {iso(end_ms)}"
    return ""


def hours_of(spark: SparkSession, stream: str, start_ms: int, end_ms: int) -> list[tuple[int, int]]:
    """The archive's hours with events in [start_ms, end_ms), oldest first."""
    return [
        (d, h)
        for d, h in partitions(spark, HiveTable(archive_table(stream)).name)
        if hour_start(d, h) * 1000 < end_ms and (hour_start(d, h) + 3600) * 1000 > start_ms
    ]


class Backfiller(JobRunner[Backfill, BackfillProgress]):
    kind = Backfill

    def __init__(
        self,
        spark: SparkSession,
        settings: Settings,
        spec: StreamSpec,
        job: Backfill,
        key: bytes | None,
    ) -> None:
        super().__init__(spark, settings, spec, job, key)
        output = spec.output(job.output)
        assert output is not None, "a backfill of an output the stream has"
        self.output = output
        self.meter = Meter(spark, f"backfill.{spec.name}.{output.name}")
        self.writer = replayer_for(Route(settings, spec, output), self.meter)
        self.paths = paths_read_by([output])

    def records(self, start_ms: int, end_ms: int) -> DataFrame:
        return archive_records(self.spark, self.spec.name, start_ms, end_ms)

    def run(self, stop: threading.Event) -> bool:
        backfill, progress = self.job, self.progress
        self.writer.prepare(self.spark)
        if isinstance(self.writer, ReplacesRanges):
            self.writer.settle_replays(self.spark, keep=backfill.id)
        if progress.total is None:
            progress.total = self.records(backfill.start, backfill.end).count()
            progress.save(self.path)
        for dateint, hour in hours_of(self.spark, self.spec.name, backfill.start, backfill.end):
            begins = int(hour_start(dateint, hour) * 1000)
            window = (max(backfill.start, begins), min(backfill.end, begins + 3_600_000))
            if not self.hour(f"{dateint}{hour:02d}", window, stop):
                return False
        if isinstance(self.writer, ReplacesRanges):
            self.writer.settle_replays(self.spark, keep=None)
        return self.done(
            f"{progress.read} events read, {progress.delivered} delivered, "
            f"{progress.dead_lettered} dead-lettered, {progress.unreadable} unreadable"
        )

    def hour(self, key: str, window: tuple[int, int], stop: threading.Event) -> bool:
        """One hour's `window`, slice by slice at the backfill's rate; False if stopped."""
        backfill, progress = self.job, self.progress
        done = progress.hours.get(key)
        if done is not None and done.done:
            return True
        # Before the hour is read: the archive then holds all of it, and the live output
        # writes none of its rows after they are replaced.
        replaces = isinstance(self.writer, ReplacesRanges)
        if replaces and not self.wait_until_settled(window[1], stop):
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
            if isinstance(self.writer, TakesOut):
                outcome = self.writer.write_replay_taking_out(frame, left, tags[n])
            else:
                outcome = self.writer.write_replay(frame, tags[n])
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
            self.paced(stop, counts.read, began)
        if isinstance(self.writer, ReplacesRanges):
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
                log.info("backfill %s waits for %s", self.job.id, waiting)
                said = waiting
            stop.wait(SETTLE_POLL_SECONDS)
        return False

    def stopped(self, key: str, window: tuple[int, int], tags: list[str]) -> bool:
        """Stopped on purpose halfway through an hour: a sink that staged its slices discards
        them, and the hour starts again from its first slice next time."""
        if isinstance(self.writer, ReplacesRanges):
            self.writer.end_replay(self.spark, window, tags, keep=False)
            self.progress.hours.pop(key, None)
            self.progress.save(self.path)
        return False
