"""A plain local Spark session (no stack needed, only the project's compiled classes) for the
router's Column-level tests."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from contracts.settings import Settings
from router.lang.ast import Expr, Projection, paths_read
from router.source import parse, payload
from stack import jars

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
        .config("spark.jars", str(jars.shipped_jar(Settings(), "RouterMeter")))
        .config("spark.executor.heartbeatInterval", "1s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def frame(
    spark: SparkSession, rows: list[tuple[dict, dict]], *read: Expr | Projection | None
) -> DataFrame:
    """Events (with their metadata) as the router sees them: the text, `payload` (the field
    paths that the filters and projections in `read` use, parsed as the router parses them),
    `whole` (the event as one VARIANT, what the Avro check reads) and the metadata."""
    data = [
        (json.dumps(e), m.get("guid"), m.get("timestamp"), m.get("host"), m.get("app"))
        for e, m in rows
    ]
    paths = paths_read(*read)
    value, _ = payload(*parse(F.col("value"), paths), paths)
    return spark.createDataFrame(data, SCHEMA).select(
        "*", value.alias("payload"), F.parse_json("value").alias("whole")
    )
