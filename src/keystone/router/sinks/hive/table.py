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

Files no batch wrote hold the events a backfill or a redrive routed. A rewind's replay that
writes such an event again removes that copy (`replace_copies`); a redrive leaves out the
events the table holds already (`not_held`: a rewind or a backfill wrote them, now that the
output takes them). Control refuses a redrive while a rewind of a Hive output replays, and the
other way round, as each is planned (docs/concepts/recovery.md says what is left).
"""

from __future__ import annotations

import calendar
import json
import re
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from keystone.contracts.names import HIVE_DATABASE

# The swaps of a table's copies under way in this process, one at a time (`replace_copies`).
_LOCKS: dict[str, threading.Lock] = {}
# A backfill's swap of an hour: its plan, then a mark once it is carried out.
JOURNAL, APPLIED = ".swap.json", ".swap.applied"
# A published file: batch-<query id>-<batch id>-<n>.parquet (a backfill that replaced some of
# its rows leaves the others as `<that name>.<hex>.parquet`).
PUBLISHED = re.compile(r"batch-(.+)-([0-9]{12})-[0-9]{5}(?:\.[0-9a-f]{8})?\.parquet")


class HiveTable:
    """A Parquet table partitioned by `dateint` and `hour`, written batch by batch under names
    that carry each batch's tag (an output's, the stream's archive)."""

    def __init__(self, table: str) -> None:
        """`table`: its name within HIVE_DATABASE."""
        self.name = f"`{HIVE_DATABASE}`.`{table}`"
        self.location = ""

    def create(self, spark: SparkSession, columns: str) -> None:
        """Makes the table, with `columns` (DDL), if it is not there; learns its location."""
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {self.name} ({columns}) "
            "PARTITIONED BY (dateint INT, hour INT) STORED AS PARQUET"
        )
        details = spark.sql(f"DESCRIBE TABLE EXTENDED {self.name}").collect()
        self.location = next(r.data_type for r in details if r.col_name == "Location")

    def fs(self, spark: SparkSession):
        """The table's Hadoop file system and its Path class."""
        path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path
        return path(self.location).getFileSystem(
            spark.sparkContext._jsc.hadoopConfiguration()
        ), path

    def files(self, spark: SparkSession, pattern: str = "*") -> list:
        """The statuses of the files in every hour whose names match `pattern`."""
        fs, path = self.fs(spark)
        return list(fs.globStatus(path(f"{self.location}/dateint=*/hour=*/{pattern}")) or [])

    def stage(self, rows: DataFrame, tag: str) -> str:
        """Writes `rows` (with `dateint` and `hour`) to a hidden staging folder; returns it."""
        staging = f"{self.location}/_staging/{tag}"
        rows.write.mode("overwrite").partitionBy("dateint", "hour").parquet(staging)
        return staging

    def staged_hours(self, spark: SparkSession, staging: str) -> list[tuple[int, int]]:
        fs, path = self.fs(spark)
        staged = fs.globStatus(path(f"{staging}/dateint=*/hour=*/*.parquet")) or []
        return sorted({file_hour(s) for s in staged})

    def publish(self, spark: SparkSession, staging: str, tag: str) -> list[tuple[int, int]]:
        """Moves the staged files into their partitions as `<tag>-<n>.parquet`, after removing
        whatever an earlier attempt of the same tag published, and adds the partitions to the
        metastore; returns the partitions written."""
        fs, path = self.fs(spark)
        root = path(self.location)
        for earlier in self.files(spark, f"{tag}-*"):
            fs.delete(earlier.getPath(), False)
        partitions = set()
        staged = fs.globStatus(path(f"{staging}/dateint=*/hour=*/*.parquet")) or []
        for n, status in enumerate(sorted(staged, key=lambda s: s.getPath().toString())):
            hour_dir = status.getPath().getParent()
            target = path(root, f"{hour_dir.getParent().getName()}/{hour_dir.getName()}")
            fs.mkdirs(target)
            partitions.add(file_hour(status))
            if not fs.rename(status.getPath(), path(target, f"{tag}-{n:05d}.parquet")):
                raise OSError(f"could not move {status.getPath()} into {target}")
        fs.delete(path(staging), True)
        self.add_partitions(spark, sorted(partitions))
        return sorted(partitions)

    def replace_hour(
        self,
        spark: SparkSession,
        hour: tuple[int, int],
        window: tuple[int, int],
        staged: list[str],
        name: str,
    ) -> None:
        """Replaces the rows of `hour` whose `timestamp` is in `window` ([start, end), epoch
        ms) by the files staged under `staged`, moved in as `<name>-<n>-<hex>.parquet`.

        Only the files with rows in the window are touched: each is replaced by its other rows
        under its own name with a new suffix (`<name>.<hex>.parquet`), so a batch Spark runs
        again still replaces its own files and a rewind still finds its batches' rows by name;
        a file written meanwhile (a live batch past the window) is left alone. The moves and
        deletions are planned first, in a journal (`_staging/<name>.swap.json`), then carried
        out, then marked applied (`<name>.swap.applied`): done again after a crash, an
        unfinished plan is finished, an applied one is not done twice. Journals go once their
        backfill is over (`settle_swaps`)."""
        self._swap(spark, name, lambda: self._plan_swap(spark, hour, window, staged, name))

    def replace_copies(
        self, spark: SparkSession, hours: list[tuple[int, int]], guids: DataFrame, name: str
    ) -> None:
        """Removes from `hours`' files that no batch wrote (a backfill's, a redrive's) the rows
        of the events in `guids` (a frame with a `guid` column): a rewind's replay has just
        published them again in its batch `name`. Each hour's removal is journaled as a
        backfill's swap is (`<name>.copies-<dateint>-<hour>`), so that a crash midway is
        finished by the batch run again, and forgotten once carried out. One at a time per
        table: each fronting cluster's query of the output replays beside the others, in the
        router's one process, and two swaps planned on one file would each keep its other rows
        (`_LOCKS`)."""
        with _LOCKS.setdefault(self.location, threading.Lock()):
            self._replace_copies(spark, hours, guids, name)

    def _replace_copies(
        self, spark: SparkSession, hours: list[tuple[int, int]], guids: DataFrame, name: str
    ) -> None:
        fs, path = self.fs(spark)
        marked = guids.select("guid").distinct().withColumn("inside", F.lit(True))
        for hour in hours:
            swap = f"{name}.copies-{hour[0]}-{hour[1]}"
            if not fs.exists(path(f"{self.location}/_staging/{swap}{JOURNAL}")):
                others = [
                    f
                    for f in self._hour_files(spark, hour)
                    if PUBLISHED.fullmatch(f.getPath().getName()) is None
                ]
                if not others:
                    continue  # nothing but batches' files: the usual case, and no journal

            def plan(hour: tuple[int, int] = hour, swap: str = swap) -> dict[str, Any]:
                def inside(rows: DataFrame) -> DataFrame:
                    found = rows.join(marked, "guid", "left")
                    return found.withColumn("inside", F.coalesce("inside", F.lit(False)))

                return self._plan(spark, hour, [], swap, inside, batches=False)

            self._swap(spark, swap, plan)
            self.forget_swap(spark, swap)

    def not_held(self, spark: SparkSession, rows: DataFrame, tag: str) -> DataFrame:
        """`rows` (with `dateint` and `hour`) but those of events the table holds already in
        their hours, where publishing under `tag` would add them twice; the files an earlier
        attempt of `tag` published are not counted (publishing replaces them)."""
        hours = [(r.dateint, r.hour) for r in rows.select("dateint", "hour").distinct().collect()]
        files = [
            f.getPath().toString()
            for hour in hours
            for f in self._hour_files(spark, hour)
            if not f.getPath().getName().startswith(f"{tag}-")
        ]
        if not files:
            return rows
        held = spark.read.parquet(*files).select("guid")
        return rows.join(held, "guid", "left_anti")

    def forget_swap(self, spark: SparkSession, name: str) -> None:
        """A carried out swap's journal and mark gone."""
        fs, path = self.fs(spark)
        for suffix in (JOURNAL, APPLIED):
            fs.delete(path(f"{self.location}/_staging/{name}{suffix}"), False)

    def _swap(self, spark: SparkSession, name: str, plan: Callable[[], dict[str, Any]]) -> None:
        """The swap `name`: planned (unless its journal holds its plan), journaled, carried
        out and marked applied; nothing if it was applied already."""
        fs, path = self.fs(spark)
        journal = path(f"{self.location}/_staging/{name}{JOURNAL}")
        applied = path(f"{self.location}/_staging/{name}{APPLIED}")
        if fs.exists(applied):
            return
        if fs.exists(journal):
            planned = json.loads(_read_text(spark, journal))
        else:
            planned = plan()
            _write_text(spark, journal, json.dumps(planned))
        self._carry_out(spark, planned)
        _write_text(spark, applied, "")

    def settle_swaps(self, spark: SparkSession, keep: str | None) -> None:
        """Finishes the swaps a backfill's application left halfway (killed, or cancelled mid-
        swap) and forgets the finished ones, with what backfills left staged, but those whose
        names begin with `keep` (the backfill running, which goes on with its own)."""
        fs, path = self.fs(spark)
        folder = f"{self.location}/_staging"
        for status in fs.globStatus(path(f"{folder}/bf-*{JOURNAL}")) or []:  # a batch's its own
            name = status.getPath().getName().removesuffix(JOURNAL)
            if keep is not None and name.startswith(keep):
                continue
            applied = path(f"{folder}/{name}{APPLIED}")
            if not fs.exists(applied):
                self._carry_out(spark, json.loads(_read_text(spark, status.getPath())))
            fs.delete(status.getPath(), False)
            fs.delete(applied, False)
        for status in fs.globStatus(path(f"{folder}/bf-*")) or []:
            name = status.getPath().getName()
            if status.isDirectory() and (keep is None or not name.startswith(keep)):
                fs.delete(status.getPath(), True)

    def _carry_out(self, spark: SparkSession, plan: dict[str, Any]) -> None:
        """The plan's moves, then its deletions, then its staged folders gone: each step
        skips what a first attempt did."""
        fs, path = self.fs(spark)
        for source, target in plan["moves"]:
            if fs.exists(path(source)) and not fs.rename(path(source), path(target)):
                raise OSError(f"could not move {source} to {target}")
        for file in plan["deletes"]:
            fs.delete(path(file), False)
        for where in [*plan["staged"], plan["kept"]]:
            fs.delete(path(where), True)
        self.add_partitions(spark, [(plan["hour"][0], plan["hour"][1])])

    def _plan_swap(
        self,
        spark: SparkSession,
        hour: tuple[int, int],
        window: tuple[int, int],
        staged: list[str],
        name: str,
    ) -> dict[str, Any]:
        """What `replace_hour` moves and deletes: every file of the hour when the window holds
        it whole, else those with rows in the window."""
        dateint, hour_of_day = hour
        begins = calendar.timegm(time.strptime(f"{dateint}{hour_of_day:02d}", "%Y%m%d%H")) * 1000
        start, end = window
        if start <= begins and end >= begins + 3_600_000:
            return self._plan(spark, hour, staged, name, None)
        return self._plan(
            spark,
            hour,
            staged,
            name,
            lambda rows: rows.withColumn(
                "inside", (F.col("timestamp") >= start) & (F.col("timestamp") < end)
            ),
        )

    def _plan(
        self,
        spark: SparkSession,
        hour: tuple[int, int],
        staged: list[str],
        name: str,
        inside: Callable[[DataFrame], DataFrame] | None,
        batches: bool = True,
    ) -> dict[str, Any]:
        """A swap's moves and deletions in `hour`: the files (but batches' files, unless
        `batches`) with rows `inside` marks (a boolean column of that name; None: every file)
        are each replaced by their other rows, staged under the plan's `kept` folder, one file
        per touched file; the files staged under `staged` are moved in."""
        fs, path = self.fs(spark)
        dateint, hour_of_day = hour
        folder = f"{self.location}/dateint={dateint}/hour={hour_of_day}"
        existing = {
            s.getPath().getName(): s.getPath().toString()
            for s in self._hour_files(spark, hour)
            if batches or PUBLISHED.fullmatch(s.getPath().getName()) is None
        }
        suffix = secrets.token_hex(4)
        kept = f"{self.location}/_staging/{name}-{suffix}-kept"
        moves: list[tuple[str, str]] = []
        touched = set(existing)
        if existing and inside is not None:
            read = spark.read.parquet(*existing.values()).withColumn(
                "source", F.element_at(F.split(F.input_file_name(), "/"), -1)
            )
            rows = inside(read).persist()
            try:
                touched = {
                    r.source for r in rows.where("inside").select("source").distinct().collect()
                }
                if touched:
                    others = rows.where(~F.col("inside") & F.col("source").isin(*touched))
                    others.select("guid", "timestamp", "record", "source").repartition(
                        "source"
                    ).write.partitionBy("source").parquet(kept)
            finally:
                rows.unpersist()
            for status in fs.globStatus(path(f"{kept}/source=*/*.parquet")) or []:
                source = status.getPath().getParent().getName().removeprefix("source=")
                base = source.removesuffix(".parquet").split(".")[0]
                # A name of its own (a file and what a swap left of it share their base).
                kept_as = f"{base}.{secrets.token_hex(4)}.parquet"
                moves.append((status.getPath().toString(), f"{folder}/{kept_as}"))
        new = [
            status.getPath().toString()
            for where in staged
            for status in fs.globStatus(path(f"{where}/dateint=*/hour=*/*.parquet")) or []
        ]
        moves += [(file, f"{folder}/{name}-{n:05d}-{suffix}.parquet") for n, file in enumerate(new)]
        fs.mkdirs(path(folder))
        return {
            "hour": list(hour),
            "moves": moves,
            "deletes": [existing[file] for file in sorted(touched)],
            "staged": staged,
            "kept": kept,
        }

    def _hour_files(self, spark: SparkSession, hour: tuple[int, int]) -> list:
        fs, path = self.fs(spark)
        folder = f"{self.location}/dateint={hour[0]}/hour={hour[1]}"
        return list(fs.globStatus(path(folder, "*.parquet")) or [])

    def unstage(self, spark: SparkSession, staged: list[str]) -> None:
        fs, path = self.fs(spark)
        for where in staged:
            fs.delete(path(where), True)

    def add_partitions(self, spark: SparkSession, partitions: list[tuple[int, int]]) -> None:
        if partitions:
            spark.sql(
                f"ALTER TABLE {self.name} ADD IF NOT EXISTS "
                + " ".join(f"PARTITION (dateint={d}, hour={h})" for d, h in partitions)
            )


def hour_columns(timestamp: str = "timestamp") -> list[Column]:
    """`dateint` (yyyymmdd) and `hour` of an epoch-milliseconds column, in UTC."""
    ingest = F.timestamp_millis(timestamp)
    return [
        F.date_format(ingest, "yyyyMMdd").cast("int").alias("dateint"),
        F.hour(ingest).alias("hour"),
    ]


def hour_of(epoch_ms: int) -> tuple[int, int]:
    """The (dateint, hour) partition of a time, in UTC."""
    when = time.gmtime(epoch_ms / 1000)
    return int(time.strftime("%Y%m%d", when)), when.tm_hour


def file_hour(status) -> tuple[int, int]:
    """The (dateint, hour) partition a file is in."""
    hour_dir = status.getPath().getParent()
    date_dir = hour_dir.getParent()
    return int(date_dir.getName().split("=")[1]), int(hour_dir.getName().split("=")[1])


def _read_text(spark: SparkSession, file) -> str:
    """A small file's text, through the table's Hadoop file system."""
    fs = file.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    stream = fs.open(file)
    try:
        return spark.sparkContext._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()


def _write_text(spark: SparkSession, file, text: str) -> None:
    """Writes a small file whole or not at all (written beside it, then renamed)."""
    fs = file.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    staging = file.suffix(".tmp")
    stream = fs.create(staging, True)
    try:
        stream.write(bytearray(text.encode()))
    finally:
        stream.close()
    if not fs.rename(staging, file):
        raise OSError(f"could not write {file}")
