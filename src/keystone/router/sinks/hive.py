"""`hive`: a Parquet table `keystone.<stream>__<output>` in the shared metastore, partitioned by
`dateint` (yyyymmdd) and `hour` of the ingest time in UTC.

Columns: `guid`, `timestamp` (ingest, epoch ms) and `record`, the projected output as JSON text
(projections differ per output and events per producer, so the record stays one JSON column).

Writes are keyed by batch: a batch is written to a hidden staging folder, then its files are
moved into the partitions under names that carry the query id and batch id. Before it moves
anything, a batch removes whatever an earlier attempt of the same batch id published, so a
batch Spark replays after a crash replaces its own rows and never adds them twice.
"""

from __future__ import annotations

import json
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from keystone.contracts.names import HIVE_DATABASE, hive_table
from keystone.router.counts import Outcome
from keystone.router.meter import Meter
from keystone.router.metrics import latency_columns
from keystone.router.sinks.base import BatchWriter
from keystone.router.sinks.route import Route


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

    def write_batch(self, frame: DataFrame, batch_id: int) -> Outcome:
        spark = frame.sparkSession
        ingest = F.timestamp_millis("timestamp")
        rows = frame.select(
            "guid",
            "timestamp",
            "record",
            F.date_format(ingest, "yyyyMMdd").cast("int").alias("dateint"),
            F.hour(ingest).alias("hour"),
        ).persist()
        try:
            count = rows.count()
            if count:
                tag = f"batch-{self._query_id()}-{batch_id:012d}"
                staging = f"{self.location}/_staging/{tag}"
                rows.write.mode("overwrite").partitionBy("dateint", "hour").parquet(staging)
                partitions = self._publish(spark, staging, tag)
                spark.sql(
                    f"ALTER TABLE {self.table} ADD IF NOT EXISTS "
                    + " ".join(f"PARTITION (dateint={d}, hour={h})" for d, h in partitions)
                )
            now_ms = F.lit(int(time.time() * 1000))
            latency = rows.agg(*latency_columns(now_ms, F.col("timestamp"))).first().asDict()
        finally:
            rows.unpersist()
        return Outcome(delivered=count, latency=latency)

    def _query_id(self) -> str:
        # Stable across restarts from the checkpoint, new for a new one: batch ids of a
        # recreated output start again at 0 and must not replace the old output's files.
        return json.loads((self.route.checkpoint / "metadata").read_text())["id"]

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
        for n, status in enumerate(sorted(staged, key=lambda s: s.getPath().toString())):
            hour_dir = status.getPath().getParent()
            date_dir = hour_dir.getParent()
            target = path(root, f"{date_dir.getName()}/{hour_dir.getName()}")
            fs.mkdirs(target)
            if not fs.rename(status.getPath(), path(target, f"{tag}-{n:05d}.parquet")):
                raise OSError(f"could not move {status.getPath()} into {target}")
            partitions.add(
                (int(date_dir.getName().split("=")[1]), int(hour_dir.getName().split("=")[1]))
            )
        fs.delete(path(staging), True)
        return sorted(partitions)
