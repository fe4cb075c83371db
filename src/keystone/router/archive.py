"""The stream's archive: every record of its fronting topic, kept in the warehouse as the table
`keystone.<stream>__archive` (Parquet, partitioned by `dateint` and `hour` of ingest time), so
that an output can be backfilled from months back rather than from Kafka's days.

A row holds what routing needs to read the event again exactly as it was read live: the
record's `key`, `value` and `headers` as Kafka had them, with its `partition` and `offset` on
the fronting `cluster` that took it, and, for queries and pruning, the envelope's `guid`,
`timestamp` (ingest, epoch ms), `host` and `app`. (Rows archived before the column was added
read `cluster` null: home's, unless a standby took writes before then.) A record with no ingest
time in its headers (the router dead-letters it) is archived under Kafka's own timestamp for
it.

The router writes it in one more query, `<stream>._archive`, by batch like a Hive output (a
batch Spark runs again replaces its own files), and drops the hours older than the spec's
`archive.keep_days` whole. `archive_records` reads it back as the fronting topic's records, for
the same `envelope()` the live outputs use.
"""

from __future__ import annotations

import calendar
import json
import logging
import threading
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from keystone.contracts import envelope
from keystone.contracts.fronting import FrontingCluster, query_key
from keystone.contracts.names import ARCHIVE_QUERY, archive_table, fronting_topic
from keystone.contracts.recovery import ArchiveSpan
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.router.counts import Outcome
from keystone.router.metrics import latency_columns
from keystone.router.sinks.hive.table import HiveTable, hour_columns, hour_of
from keystone.router.source import META, first_headers

log = logging.getLogger(__name__)

# Columns added since the first archives, by name: added to theirs as a router starts.
ADDED = {"cluster": "cluster STRING"}
COLUMNS = ", ".join(
    [
        "guid STRING, `timestamp` BIGINT, host STRING, app STRING, key BINARY, value BINARY, "
        "headers ARRAY<STRUCT<key: STRING, value: BINARY>>, `partition` INT, `offset` BIGINT",
        *ADDED.values(),
    ]
)
EXPIRE_EVERY = 3600.0  # seconds between two looks for hours past retention


def archived(records: DataFrame, cluster: str) -> DataFrame:
    """The archive's rows (with `dateint` and `hour`) from the Kafka source's records on the
    fronting cluster named `cluster`."""
    meta = first_headers(records.sparkSession, META)

    def header(name: str):
        return meta[name].cast("string")

    stamped = header(envelope.TIMESTAMP).try_cast("long")
    return records.select(
        header(envelope.GUID).alias("guid"),
        F.coalesce(stamped, F.unix_millis("timestamp")).alias("timestamp"),
        header(envelope.HOST).alias("host"),
        header(envelope.APP).alias("app"),
        "key",
        "value",
        "headers",
        "partition",
        "offset",
        F.lit(cluster).alias("cluster"),
    ).select("*", *hour_columns())


class ArchiveWriter:
    """The archive queries' sink (one query a fronting cluster, one writer: the archive's span
    is the stream's): `write_batch` per micro-batch, like `HiveWriter`'s."""

    def __init__(self, settings: Settings, spec: StreamSpec) -> None:
        self.settings = settings
        self.spec = spec
        self.table = HiveTable(archive_table(spec.name))
        self.span_path = ArchiveSpan.of(settings.state_dir, spec.name)
        self.span = ArchiveSpan.load(self.span_path)
        # The expiry's thread and the query's batches both move the span. A batch holds this
        # lock only to compare and save; an expiry, which may wait on the metastore, holds its
        # own, and takes in what batches archived while it looked (`_archived_meanwhile`).
        self._span_lock = threading.Lock()
        self._expiring = threading.Lock()
        self._archived_meanwhile: float | None = None
        # Each cluster's archive query prepares the table as it starts, at the same moment.
        self._preparing = threading.Lock()

    def prepare(self, spark: SparkSession) -> None:
        with self._preparing:
            self.table.create(spark, COLUMNS)
            held = {c.name for c in spark.catalog.listColumns(self.table.name)}
            if missing := [ddl for name, ddl in ADDED.items() if name not in held]:
                spark.sql(f"ALTER TABLE {self.table.name} ADD COLUMNS ({', '.join(missing)})")
        self.expire(spark)

    def write_batch(
        self, frame: DataFrame, batch_id: int, cluster: FrontingCluster | None = None
    ) -> Outcome:
        """One batch of the archive's query on `cluster` (home by default)."""
        spark = frame.sparkSession
        rows = frame.persist()
        try:
            count = rows.count()
            if count:
                checkpoint = archive_checkpoint(self.settings, self.spec.name, cluster)
                query = json.loads((checkpoint / "metadata").read_text())["id"]
                tag = f"batch-{query}-{batch_id:012d}"
                self.table.publish(spark, self.table.stage(rows, tag), tag)
            now_ms = F.lit(int(time.time() * 1000))
            latency = (
                rows.agg(
                    *latency_columns(now_ms, F.col("timestamp")), F.min("timestamp").alias("oldest")
                )
                .first()
                .asDict()
            )
            oldest = latency.pop("oldest")
        finally:
            rows.unpersist()
        if oldest is not None:
            self.held_from(oldest / 1000)
        return Outcome(delivered=count, latency=latency)

    def held_from(self, first: float) -> None:
        """A batch archived events ingested from `first` (epoch s) on: the span begins there
        if not before."""
        with self._span_lock:
            if self._archived_meanwhile is not None:
                self._archived_meanwhile = min(self._archived_meanwhile, first)
            if self.span.first is None or first < self.span.first:
                self._save_span(first)

    def _save_span(self, first: float | None) -> None:
        self.span = ArchiveSpan(first=first)
        try:
            self.span.save(self.span_path)
        except OSError as e:  # the archive goes on; a backfill's plan reads an older span
            log.error("the archive's span not saved to %s: %s", self.span_path, e)

    def keep_expiring(
        self, spark: SparkSession, stop: threading.Event, every: float = EXPIRE_EVERY
    ) -> threading.Thread:
        """`expire` every `every` seconds until `stop` (`prepare` looks first), on a thread of
        its own: an idle stream's archive ages too, though no batch runs, and a metastore that
        hangs holds only this thread, never the router's supervisor."""

        def run() -> None:
            while not stop.wait(every):
                try:
                    self.expire(spark)
                except Exception as e:  # the metastore away: the next look drops them
                    log.error("archive hours past retention not dropped: %s", e)

        thread = threading.Thread(target=run, name="archive-expiry", daemon=True)
        thread.start()
        return thread

    def expire(self, spark: SparkSession, now: float | None = None) -> list[tuple[int, int]]:
        """Drops the hours wholly older than `archive.keep_days` (a managed table's partition
        goes with its files); returns them."""
        cutoff = (now if now is not None else time.time()) - self.spec.archive.keep_days * 86400
        with self._expiring:
            with self._span_lock:
                self._archived_meanwhile = float("inf")
            try:
                held = partitions(spark, self.table.name)
                old = [(d, h) for d, h in held if hour_start(d, h) + 3600 <= cutoff]
                for d, h in old:
                    where = f"PARTITION (dateint={d}, hour={h})"
                    spark.sql(f"ALTER TABLE {self.table.name} DROP IF EXISTS {where}")
            finally:
                with self._span_lock:
                    meanwhile, self._archived_meanwhile = self._archived_meanwhile, None
            kept = [hour_start(d, h) for d, h in held if (d, h) not in old]
            with self._span_lock:
                first = self._first_in(min(kept, default=None))
                if meanwhile is not None and meanwhile < float("inf"):
                    first = meanwhile if first is None else min(first, meanwhile)
                self._save_span(first)
        return old

    def _first_in(self, hour: float | None) -> float | None:
        """Where the archive begins if `hour` is the first it holds: the oldest event a batch
        saw, if it is of that hour (the first hour an archive writes begins where the topic
        did, within it), else the hour's start."""
        seen = self.span.first
        if hour is not None and seen is not None and hour <= seen < hour + 3600:
            return seen
        return hour


def partitions(spark: SparkSession, table: str) -> list[tuple[int, int]]:
    """The table's (dateint, hour) partitions, as the metastore lists them."""
    found = []
    for row in spark.sql(f"SHOW PARTITIONS {table}").collect():
        parts = dict(part.split("=", 1) for part in row[0].split("/"))
        found.append((int(parts["dateint"]), int(parts["hour"])))
    return sorted(found)


def archive_checkpoint(
    settings: Settings, stream: str, cluster: FrontingCluster | None = None
) -> Path:
    """The archive query's checkpoint on a fronting cluster (home by default)."""
    return settings.checkpoints_dir / stream / query_key(ARCHIVE_QUERY, cluster)


def archive_records(spark: SparkSession, stream: str, start_ms: int, end_ms: int) -> DataFrame:
    """The archived records ingested in [start_ms, end_ms), as the fronting topic's records
    (key, value, headers, topic, partition, offset): what `router.source.envelope` reads. Only
    the hours of the range are read (the `dateint`/`hour` predicates prune the others)."""
    table = HiveTable(archive_table(stream)).name
    (first_day, first_hour), (last_day, last_hour) = hour_of(start_ms), hour_of(end_ms - 1)
    day, hour = F.col("dateint"), F.col("hour")
    # Comparisons of the partition columns alone: the metastore lists only these hours.
    hours = ((day > first_day) | ((day == first_day) & (hour >= first_hour))) & (
        (day < last_day) | ((day == last_day) & (hour <= last_hour))
    )
    return (
        spark.table(table)
        .where(hours)
        .where((F.col("timestamp") >= start_ms) & (F.col("timestamp") < end_ms))
        .select(
            "key",
            "value",
            "headers",
            F.lit(fronting_topic(stream)).alias("topic"),
            "partition",
            "offset",
        )
    )


def hour_start(dateint: int, hour: int) -> float:
    """When a (dateint, hour) partition begins, epoch seconds."""
    return calendar.timegm(time.strptime(f"{dateint}{hour:02d}", "%Y%m%d%H"))
