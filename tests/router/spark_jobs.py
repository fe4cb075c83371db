"""Spark applications the router tests run as separate processes (the connector's jars must be
on the JVM from its start), each printing one JSON line.

    python -m tests.router.spark_jobs read-fronting STREAM [FIELD ...]
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import functions as F

from contracts.settings import Settings
from router.source import fronting
from stack.spark import spark_session


def read_fronting(stream: str, *fields: str) -> list[dict]:
    """The stream's events as the router reads them, `payload` holding `fields`."""
    settings = Settings()
    spark = spark_session(settings, "test-read-fronting")
    rows = (
        fronting(spark, settings, stream, streaming=False, starting="earliest", fields=fields)
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


if __name__ == "__main__":
    job, *args = sys.argv[1:]
    if job != "read-fronting":
        sys.exit(f"unknown job {job!r}")
    print(json.dumps(read_fronting(*args)))
