"""The Hive output's writer: each batch staged, then published under names that carry its
query and batch ids, so a batch run again replaces its own rows (`table`); a rewind's replay
removes the batches it undoes hour by hour, and the copies a backfill or a redrive wrote of the
events it writes again; a backfill replaces an hour's rows of its range whole; a redrive
publishes its slices under their tags, but the events the table holds already."""

from __future__ import annotations

import json
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from keystone.router.counts import Outcome
from keystone.router.meter import Meter
from keystone.router.metrics import latency_columns
from keystone.router.sinks.base import BatchWriter, ReplacesRanges
from keystone.router.sinks.hive.table import PUBLISHED, HiveTable, file_hour, hour_columns, hour_of
from keystone.router.sinks.route import Route


class HiveWriter(BatchWriter, ReplacesRanges):
    def __init__(self, route: Route, meter: Meter | None = None) -> None:
        super().__init__(route, meter)
        table = route.output.sink.table(route.stream.name, route.output.name)
        assert table is not None, "a Hive output's writer"
        self.table = HiveTable(table)

    def prepare(self, spark: SparkSession) -> None:
        super().prepare(spark)
        self.table.create(spark, "guid STRING, `timestamp` BIGINT, record STRING")
        rewind = self.route.rewind
        if rewind is not None and not rewind.replaying:  # caught up: nothing replaced is left
            self._remove_replaced(spark, up_to=None)

    def write_batch(self, frame: DataFrame, batch_id: int) -> Outcome:
        spark = frame.sparkSession
        rows = frame.select("guid", "timestamp", "record", "replay", *hour_columns()).persist()
        try:
            count = rows.count()
            if count:
                tag = f"batch-{self._query_id()}-{batch_id:012d}"
                staging = self.table.stage(rows.drop("replay"), tag)
                rewind = self.route.rewind
                staged = self.table.staged_hours(spark, staging)
                replaying = rewind is not None and rewind.replaying and bool(staged)
                if replaying:
                    self._remove_replaced(spark, up_to=staged[-1])
                self.table.publish(spark, staging, tag)
                if replaying:
                    # An event a backfill or a redrive wrote after the restore point has that
                    # copy in a file of its own, not a batch's the rewind undoes: this batch's
                    # copy replaces it (after publishing: a crash between leaves a copy twice
                    # until the batch is run again, never none).
                    # Only the replayed rows: a row past the replay's end is a first delivery.
                    replayed = rows.where(F.col("replay").isNotNull())
                    self.table.replace_copies(spark, staged, replayed, tag)
            now_ms = F.lit(int(time.time() * 1000))
            # A replayed event's latency is the replay's, not delivery's: left out.
            live = F.when(F.col("replay").isNull(), F.col("timestamp"))
            latency = rows.agg(*latency_columns(now_ms, live)).first().asDict()
        finally:
            rows.unpersist()
        return Outcome(delivered=count, latency=latency)

    def write_replay(self, routed: DataFrame, tag: str) -> Outcome | None:
        """Staged only: the hour's rows of the range are replaced whole once all its slices
        are (`end_replay`), so what the output leaves out now is gone with them."""
        rows = routed.select("guid", "timestamp", "record", *hour_columns()).persist()
        try:
            count = rows.count()
            self.table.stage(rows, tag)
        finally:
            rows.unpersist()
        return Outcome(delivered=count)

    def write_again(self, routed: DataFrame, tag: str) -> Outcome | None:
        """Published under the tag's name: an attempt again replaces its own files. An event
        the table holds already (a rewind's replay or a backfill routed its record again, now
        that the output takes it) is not written twice; it counts as delivered, as the table
        holds it."""
        rows = routed.select("guid", "timestamp", "record", *hour_columns()).persist()
        try:
            count = rows.count()
            if count:
                spark = rows.sparkSession
                absent = self.table.not_held(spark, rows, tag)
                self.table.publish(spark, self.table.stage(absent, tag), tag)
        finally:
            rows.unpersist()
        return Outcome(delivered=count)

    def end_replay(
        self, spark: SparkSession, window: tuple[int, int], tags: list[str], keep: bool
    ) -> None:
        staged = [f"{self.table.location}/_staging/{tag}" for tag in tags]
        if not keep:
            self.table.unstage(spark, staged)
            return
        self.table.replace_hour(spark, hour_of(window[0]), window, staged, tags[0])

    def settle_replays(self, spark: SparkSession, keep: str | None) -> None:
        self.table.settle_swaps(spark, keep)

    def _query_id(self) -> str:
        # Stable across restarts from the checkpoint, new for a new one: batch ids of a
        # recreated output start again at 0 and must not replace the old output's files.
        return json.loads((self.route.checkpoint / "metadata").read_text())["id"]

    def _remove_replaced(self, spark: SparkSession, up_to: tuple[int, int] | None) -> None:
        """Deletes the files of the batches the route's rewind replaces, in the hours up to
        `up_to` (dateint, hour), or in every hour."""
        rewind = self.route.rewind
        if rewind is None or not rewind.replaced:
            return
        fs, _ = self.table.fs(spark)
        for status in self.table.files(spark, "batch-*"):
            found = PUBLISHED.fullmatch(status.getPath().getName())
            if found is None:
                continue
            query, batch = found.group(1), int(found.group(2))
            if not any(r.query == query and batch > r.after for r in rewind.replaced):
                continue
            if up_to is None or file_hour(status) <= up_to:
                fs.delete(status.getPath(), False)
