"""A plain local Spark session (no stack needed) for the router's Column-level tests."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

SCHEMA = StructType(
    [
        StructField("value", StringType()),
        StructField("guid", StringType()),
        StructField("timestamp", LongType()),
        StructField("host", StringType()),
        StructField("app", StringType()),
    ]
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
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def frame(spark: SparkSession, rows: list[tuple[dict, dict]]) -> DataFrame:
    """Events (with their metadata) as the router sees them: text, parsed payload, metadata."""
    data = [
        (json.dumps(e), m.get("guid"), m.get("timestamp"), m.get("host"), m.get("app"))
        for e, m in rows
    ]
    return spark.createDataFrame(data, SCHEMA).withColumn("payload", F.parse_json("value"))
