"""Spark applications the stack tests run as separate processes, each through the project's
session builder (stack.spark) with the test stack's KEYSTONE_* settings.

    python -m tests.stack.spark_jobs kafka-copy SOURCE_TOPIC TARGET_TOPIC
    python -m tests.stack.spark_jobs hive-write DATABASE TABLE ROWS

Each prints one JSON line with what it did.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import functions as F

from contracts.settings import Settings
from stack.spark import spark_session


def kafka_copy(source: str, target: str) -> dict:
    """Reads a topic with Spark's Kafka source (headers too) and writes it with its sink."""
    settings = Settings()
    spark = spark_session(settings, "test-kafka-copy")
    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
        .option("subscribe", source)
        .option("includeHeaders", "true")
        .load()
    )
    rows = frame.select(
        F.col("value").cast("string").alias("value"),
        F.transform("headers", lambda h: F.struct(h.key, h.value.cast("string"))).alias("headers"),
    ).collect()
    (
        frame.select("key", "value", "headers")
        .write.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
        .option("topic", target)
        .save()
    )
    spark.stop()
    return {
        "values": sorted(r["value"] for r in rows),
        "headers": [[list(h) for h in r["headers"]] for r in rows],
    }


def hive_write(database: str, table: str, rows: int) -> dict:
    """Creates a partitioned (dateint, hour) Parquet table and appends `rows` rows to it."""
    spark = spark_session(Settings(), f"test-hive-{table}")
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {database}.{table} (id BIGINT, writer STRING) "
        "PARTITIONED BY (dateint INT, hour INT) STORED AS PARQUET"
    )
    data = spark.range(rows).select(
        "id",
        F.lit(table).alias("writer"),
        F.lit(20261121).alias("dateint"),
        (F.col("id") % 2).cast("int").alias("hour"),
    )
    data.write.insertInto(f"{database}.{table}")
    count = spark.table(f"{database}.{table}").count()
    spark.stop()
    return {"table": f"{database}.{table}", "count": count}


if __name__ == "__main__":
    job, *args = sys.argv[1:]
    if job == "kafka-copy":
        result = kafka_copy(*args)
    elif job == "hive-write":
        result = hive_write(args[0], args[1], int(args[2]))
    else:
        sys.exit(f"unknown job {job!r}")
    print(json.dumps(result))
