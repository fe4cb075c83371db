"""`hive`: a Parquet table `keystone.<stream>__<output>` in the shared metastore, partitioned by
`dateint` (yyyymmdd) and `hour` of the ingest time in UTC.

Columns: `guid`, `timestamp` (ingest, epoch ms) and `record`, the projected output as JSON text
(projections differ per output and events per producer, so the record stays one JSON column).

Writes are keyed by batch: a batch is written to a hidden staging folder, then its files are
moved into the partitions under names that carry the query id and batch id. Before it moves
anything, a batch removes whatever an earlier attempt of the same batch id published, so a
batch Spark replays after a crash replaces its own rows and never adds them twice.

A rewind resets the table by the same names: its replay removes the files of the batches the
rewind undoes (`Rewind.replaced`) from each hour up to the latest it writes, as it reaches it,
and once it has caught up, from every hour. Each event of the period is then in the table
once; an hour being replayed is partly filled until the replay has passed it.
"""

from __future__ import annotations

import json
import re
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from keystone.contracts.names import HIVE_DATABASE, hive_table
from keystone.router.counts import Outcome
from keystone.router.meter import Meter
from keystone.router.metrics import latency_columns
from keystone.router.sinks.base import BatchWriter
from keystone.router.sinks.route import Route

# A published file: batch-<query id>-<batch id>-<n>.parquet
_PUBLISHED = re.compile(r"batch-(.+)-([0-9]{12})-[0-9]{5}\.parquet")


class HiveWriter(BatchWriter):
    def __init__(self, route: Route, meter: Meter | None = None) -> None:
        super().__init__(route, meter)
        self.table = f"`{HIVE_DATABASE}`.`{hive_table(route.stream.name, route.output.name)}`"
        self.location = ""

    def prepare(self, spark: SparkSession) -> None:
        super().prepare(spark)
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {self.table} "
            "(guid STRING, `timestamp` BIGINT, record STRING) "
            "PARTITIONED BY (dateint INT, hour INT) STORED AS PARQUET"
        )
        details = spark.sql(f"DESCRIBE TABLE EXTENDED {self.table}").collect()
        self.location = next(r.data_type for r in details if r.col_name == "Location")
        rewind = self.route.rewind
        if rewind is not None and not rewind.replaying:  # caught up: nothing replaced is left
            self._remove_replaced(spark, up_to=None)

    def write_batch(self, frame: DataFrame, batch_id: int) -> Outcome:
        spark = frame.sparkSession
        ingest = F.timestamp_millis("timestamp")
        rows = frame.select(
            "guid",
            "timestamp",
            "record",
            "replay",
            F.date_format(ingest, "yyyyMMdd").cast("int").alias("dateint"),
            F.hour(ingest).alias("hour"),
        ).persist()
        try:
            count = rows.count()
            if count:
                tag = f"batch-{self._query_id()}-{batch_id:012d}"
                staging = f"{self.location}/_staging/{tag}"
                table_rows = rows.drop("replay")
                table_rows.write.mode("overwrite").partitionBy("dateint", "hour").parquet(staging)
                partitions = self._publish(spark, staging, tag)
                spark.sql(
                    f"ALTER TABLE {self.table} ADD IF NOT EXISTS "
                    + " ".join(f"PARTITION (dateint={d}, hour={h})" for d, h in partitions)
                )
            now_ms = F.lit(int(time.time() * 1000))
            # A replayed event's latency is the replay's, not delivery's: left out.
            live = F.when(F.col("replay").isNull(), F.col("timestamp"))
            latency = rows.agg(*latency_columns(now_ms, live)).first().asDict()
        finally:
            rows.unpersist()
        return Outcome(delivered=count, latency=latency)

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
        path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path
        fs = path(self.location).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
        for status in fs.globStatus(path(f"{self.location}/dateint=*/hour=*/batch-*")) or []:
            found = _PUBLISHED.fullmatch(status.getPath().getName())
            if found is None:
                continue
            query, batch = found.group(1), int(found.group(2))
            if not any(r.query == query and batch > r.after for r in rewind.replaced):
                continue
            if up_to is None or _hour(status) <= up_to:
                fs.delete(status.getPath(), False)

    def _publish(self, spark: SparkSession, staging: str, tag: str) -> list[tuple[int, int]]:
        """Moves the staged files into their partitions; returns the partitions written."""
        jvm = spark.sparkContext._jvm
        path = jvm.org.apache.hadoop.fs.Path
        root = path(self.location)
        fs = root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
        for earlier in fs.globStatus(path(f"{self.location}/dateint=*/hour=*/{tag}-*")) or []:
            fs.delete(earlier.getPath(), False)
        partitions = set()
        staged = fs.globStatus(path(f"{staging}/dateint=*/hour=*/*.parquet")) or []
        rewind = self.route.rewind
        if rewind is not None and rewind.replaying and staged:
            self._remove_replaced(spark, up_to=max(_hour(s) for s in staged))
        for n, status in enumerate(sorted(staged, key=lambda s: s.getPath().toString())):
            hour_dir = status.getPath().getParent()
            target = path(root, f"{hour_dir.getParent().getName()}/{hour_dir.getName()}")
            fs.mkdirs(target)
            partitions.add(_hour(status))
            if not fs.rename(status.getPath(), path(target, f"{tag}-{n:05d}.parquet")):
                raise OSError(f"could not move {status.getPath()} into {target}")
        fs.delete(path(staging), True)
        return sorted(partitions)


def _hour(status) -> tuple[int, int]:
    """The (dateint, hour) partition a file is in."""
    hour_dir = status.getPath().getParent()
    date_dir = hour_dir.getParent()
    return int(date_dir.getName().split("=")[1]), int(hour_dir.getName().split("=")[1])
