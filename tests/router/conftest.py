"""A plain local Spark session (no stack needed, only the project's compiled classes) for the
router's Column-level tests."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from keystone.contracts.envelope import METADATA
from keystone.contracts.settings import Settings
from keystone.router import jvm
from keystone.router.lang.ast import Expr, Projection, paths_read
from keystone.router.source import envelope

# The records of Spark's Kafka source.
KAFKA = (
    "key binary, value binary, headers array<struct<key:string,value:binary>>, "
    "topic string, partition int, offset long"
)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = (
        SparkSession.builder.master("local[1]")
        .appName("lang-agreement")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.jars", ",".join(str(jvm.class_jar(Settings(), n)) for n in jvm.SHIPPED))
        .config("spark.executor.heartbeatInterval", "1s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def frame(
    spark: SparkSession, rows: list[tuple[dict, dict]], *read: Expr | Projection | None
) -> DataFrame:
    """Events (with their metadata) read as the router reads them (`router.source.envelope`):
    `payload` (the field paths that the filters and projections in `read` use), the metadata
    from the headers, `value` (the text), and `whole` (the event as one VARIANT, what the Avro
    check reads)."""
    records = [
        (None, json.dumps(e).encode(), [(METADATA[n], str(v).encode()) for n, v in m.items()])
        for e, m in rows
    ]
    kafka = spark.createDataFrame([(*r, "t", 0, i) for i, r in enumerate(records)], KAFKA)
    events = envelope(kafka, paths=paths_read(*read)).orderBy("offset")
    events = events.withColumn("value", F.col("value").cast("string"))
    return events.withColumn("whole", F.parse_json("value"))
