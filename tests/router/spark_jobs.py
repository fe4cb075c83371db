"""Spark applications the router tests run as separate processes (the connector's jars must be
on the JVM from its start), each printing one JSON line.

    python -m tests.router.spark_jobs read-fronting STREAM [PATH ...]   (dotted: user.id)
    python -m tests.router.spark_jobs read-tables   (a table name a line on stdin)
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import functions as F

from keystone.contracts.settings import Settings
from keystone.router.archive import archive_records
from keystone.router.source import fronting
from keystone.router.spark import spark_session


def read_fronting(stream: str, *paths: str) -> list[dict]:
    """The stream's events as the router reads them, `payload` holding `paths`."""
    settings = Settings()
    spark = spark_session(settings, "test-read-fronting")
    rows = (
        fronting(
            spark,
            settings,
            stream,
            streaming=False,
            starting="earliest",
            paths=[tuple(path.split(".")) for path in paths],
        )
        .select(
            "guid",
            "timestamp",
            "host",
            "app",
            "hops",
            "problem",
            F.to_json("payload").alias("payload"),
            F.col("value").cast("string").alias("text"),
        )
        .collect()
    )
    spark.stop()
    return [row.asDict() for row in rows]


def read_tables() -> None:
    """For each Hive table named on stdin, its rows as one JSON line, from one long-lived
    session through the metastore (a Spark application's start is most of a `keystone sql`).
    A line `{"archive": STREAM, "from": MS, "to": MS}` answers the files a backfill of that
    range reads from the stream's archive instead (what partition pruning leaves)."""
    spark = spark_session(Settings(), "test-read-tables")
    print(json.dumps("ready"), flush=True)
    for line in sys.stdin:
        if line.startswith("{"):
            asked = json.loads(line)
            frame = archive_records(spark, asked["archive"], asked["from"], asked["to"])
            print(json.dumps(frame.inputFiles()), flush=True)
            continue
        table = line.strip()
        if not spark.catalog.tableExists(table):  # its router has yet to make it: nothing in it
            print(json.dumps([]), flush=True)
            continue
        spark.catalog.refreshTable(table)  # new files and partitions since the last read
        rows = spark.table(table).collect()
        print(json.dumps([row.asDict(recursive=True) for row in rows], default=_text), flush=True)
    spark.stop()


def _text(value: object) -> str:
    """Binary columns (an archive's key, value and headers) as UTF-8 text."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode(errors="replace")
    raise TypeError(f"{type(value).__name__} is not JSON")


if __name__ == "__main__":
    job, *args = sys.argv[1:]
    if job == "read-fronting":
        print(json.dumps(read_fronting(*args)))
    elif job == "read-tables":
        read_tables()
    else:
        sys.exit(f"unknown job {job!r}")
