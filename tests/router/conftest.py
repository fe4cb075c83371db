"""A plain local Spark session (no stack needed, only the project's compiled classes) for the
router's Column-level tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from keystone.contracts.settings import Settings
from keystone.router import jvm


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = (
        SparkSession.builder.master("local[1]")
        .appName("lang-agreement")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "1")
        # As a router's (router.spark.spark_conf): no Python call site sent per function.
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
        # Code that does not compile is an error here, not a quiet fall back to interpreting
        # the stage (as a router would, slower): the language's Java expressions generate
        # code, and a literal `-1.0D` once made theirs fail.
        .config("spark.sql.codegen.fallback", "false")
        .config("spark.jars", ",".join(str(jvm.class_jar(Settings(), n)) for n in jvm.SHIPPED))
        .config("spark.executor.heartbeatInterval", "1s")
        # Short-lived and light, as the stack's applications (tests/support/stack.py): the
        # quick compiler alone ran the language's Spark tests in 150 s against 220 to 270; the
        # serial collector costs less CPU again.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
