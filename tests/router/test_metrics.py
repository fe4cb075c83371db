"""The latency histogram Spark aggregates for an output agrees with the one counted in Python;
a router is up only while every one of its queries runs (an output whose query cannot start
makes it 0, so its alert fires, and names the query)."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from keystone.contracts import metrics as names
from keystone.router.counts import latency_counts
from keystone.router.metrics import ProgressListener, RouterMetrics, latency_columns, listen
from tests.support.waiting import eventually

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
    up = names.ROUTER_QUERY_UP
    assert value(metrics, up, stream="orders", output="search", cluster="main") == 0
    assert value(metrics, up, stream="orders", output="archive", cluster="main") == 1


def test_a_standby_clusters_idle_queries_do_not_make_the_router_down() -> None:
    """Queries on a standby fronting cluster, held while it has nothing to read, are not a
    fault; one that should run and does not is."""
    metrics = RouterMetrics("orders", home="east")
    queries = {"search": True, "search@west": False, "_stream": True, "_stream@west": False}
    metrics.running(queries, idle={"search@west", "_stream@west"})
    assert value(metrics, names.ROUTER_UP, stream="orders") == 1
    up = names.ROUTER_QUERY_UP
    assert value(metrics, up, stream="orders", output="search", cluster="west") == 0
    assert value(metrics, up, stream="orders", output="search", cluster="east") == 1
    metrics.running(queries, idle={"_stream@west"})
    assert value(metrics, names.ROUTER_UP, stream="orders") == 0


def test_the_listener_counts_a_real_querys_observed_metrics(spark: SparkSession, tmp_path) -> None:
    """Spark's own listener interface, over py4j: each progress read as its JSON."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "events.json").write_text("".join(f'{{"n": {n}}}\n' for n in range(10)))
    metrics = RouterMetrics("orders")

    def counted(stage: str) -> float | None:
        return value(metrics, names.ROUTER_EVENTS, stream="orders", output="evens", stage=stage)

    registered = listen(spark, ProgressListener(metrics))
    try:
        read = spark.readStream.schema("n long").json(str(tmp_path / "in"))
        frame = read.observe("read", F.count(F.lit(1)).alias("in")).where("n % 2 = 0")
        frame = frame.observe("matched", F.count(F.lit(1)).alias("matched"))
        query = (
            frame.writeStream.queryName("orders.evens")
            .format("noop")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        eventually("the progress heard", lambda: counted("matched") == 5)
    finally:
        spark.streams._jsqm.removeListener(registered)
    assert counted("in") == 10


def test_the_listener_sets_each_querys_lag_from_its_kafka_offsets() -> None:
    """A Kafka source's offsets as a progress's JSON has them (by topic, then partition)."""
    metrics = RouterMetrics("orders")
    source = {
        "description": "KafkaV2[Subscribe[keystone.orders]]",
        "startOffset": {"keystone.orders": {"0": 10, "1": 4}},
        "endOffset": {"keystone.orders": {"0": 20, "1": 4}},
        "latestOffset": {"keystone.orders": {"0": 26, "1": 7}},
    }
    ProgressListener(metrics).progress({"name": "orders.evens", "sources": [source]})
    assert value(metrics, names.ROUTER_LAG, stream="orders", output="evens", cluster="main") == 9
    # The same output's query on another fronting cluster: its own lag, beside home's.
    behind = {**source, "latestOffset": {"keystone.orders": {"0": 21, "1": 4}}}
    ProgressListener(metrics).progress({"name": "orders.evens@west", "sources": [behind]})
    assert value(metrics, names.ROUTER_LAG, stream="orders", output="evens", cluster="west") == 1
    assert value(metrics, names.ROUTER_LAG, stream="orders", output="evens", cluster="main") == 9
    # Another stream's query (a session's listener hears every query): nothing set for it.
    others = RouterMetrics("orders")
    ProgressListener(others).progress({"name": "other.evens", "sources": [source]})
    lags = [s for m in others.registry.collect() if m.name == names.ROUTER_LAG for s in m.samples]
    assert lags == []


def test_a_shadows_query_has_its_own_metrics_and_never_makes_the_router_down() -> None:
    """A shadow (its query's key is its id) reports its lag and whether it runs under its
    output's name in metrics of its own: its output's lag alert, and the router's down alert,
    hear nothing of it; an ended one's series go."""
    metrics = RouterMetrics("orders")
    metrics.shadows_running({"sh-0123456789ab": "evens"}, {"sh-0123456789ab": False})
    source = {
        "endOffset": {"keystone.orders": {"0": 20}},
        "latestOffset": {"keystone.orders": {"0": 26}},
    }
    ProgressListener(metrics).progress({"name": "orders.sh-0123456789ab", "sources": [source]})
    assert value(metrics, names.SHADOW_LAG, stream="orders", output="evens") == 6
    assert value(metrics, names.SHADOW_UP, stream="orders", output="evens") == 0
    lags = [s for m in metrics.registry.collect() if m.name == names.ROUTER_LAG for s in m.samples]
    assert lags == []
    metrics.shadows_running({}, {})
    assert value(metrics, names.SHADOW_UP, stream="orders", output="evens") is None
    assert value(metrics, names.SHADOW_LAG, stream="orders", output="evens") is None
