"""The latency histogram Spark aggregates for an output agrees with the one counted in Python;
a router is up only while every one of its queries runs (an output whose query cannot start
makes it 0, so its alert fires, and names the query)."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from keystone.contracts import metrics as names
from keystone.router.counts import latency_counts
from keystone.router.metrics import RouterMetrics, latency_columns

# (now_ms, ingest ms): on a bound, between bounds, beyond the last one, and no ingest time.
ROWS = [(1_000, 995), (1_000, 994), (10_000, 9_900), (10_000, 9_899), (400_000, 0), (5, None)]


def test_spark_histogram_counts_as_python_does(spark: SparkSession) -> None:
    frame = spark.createDataFrame(ROWS, "now long, ts long")
    [row] = frame.select(*latency_columns(F.col("now"), F.col("ts"))).collect()
    expected = latency_counts([(now - ts) / 1000 for now, ts in ROWS if ts is not None])
    assert row.asDict() == expected
    assert expected["latency_count"] == 5 and expected["le_0.005"] == 1


def value(metrics: RouterMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_up_only_while_every_query_runs() -> None:
    metrics = RouterMetrics("orders")
    metrics.running({"_stream": True, "search": True, "archive": True})
    assert value(metrics, names.ROUTER_UP, stream="orders") == 1
    metrics.running({"_stream": True, "search": False, "archive": True})
    assert value(metrics, names.ROUTER_UP, stream="orders") == 0
    assert value(metrics, names.ROUTER_QUERY_UP, stream="orders", output="search") == 0
    assert value(metrics, names.ROUTER_QUERY_UP, stream="orders", output="archive") == 1
