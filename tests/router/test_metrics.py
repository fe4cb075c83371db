"""The latency histogram Spark aggregates for an output agrees with the one counted in Python."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from router.metrics import latency_columns, latency_counts

# (now_ms, ingest ms): on a bound, between bounds, beyond the last one, and no ingest time.
ROWS = [(1_000, 995), (1_000, 994), (10_000, 9_900), (10_000, 9_899), (400_000, 0), (5, None)]


def test_spark_histogram_counts_as_python_does(spark: SparkSession) -> None:
    frame = spark.createDataFrame(ROWS, "now long, ts long")
    [row] = frame.select(*latency_columns(F.col("now"), F.col("ts"))).collect()
    expected = latency_counts([(now - ts) / 1000 for now, ts in ROWS if ts is not None])
    assert row.asDict() == expected
    assert expected["latency_count"] == 5 and expected["le_0.005"] == 1
