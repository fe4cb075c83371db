"""The router's Prometheus metrics, served by the driver (the fleet registers it with Prometheus).

Counts come from where Spark knows them, with no Python on the per-event path: outputs written
by Spark's Kafka sink are counted by their meters as they run (router.meter: in, matched, handed
to the sink as delivered or, too large, to the dead-letter topic, and the latency histogram);
batch sinks' queries observe their `in` and `matched` counts per batch, and the sinks report
what each batch delivered and dead-lettered; the dead-letter query's Kafka sink reports the rows
it wrote. A listener on the query progress feeds the per-batch figures in here.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Collection, Iterator
from typing import Any, ClassVar

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector
from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from keystone.contracts import metrics as names
from keystone.contracts.fronting import split_key
from keystone.contracts.names import STREAM_LEVEL
from keystone.contracts.settings import DEFAULT_CLUSTER, Settings
from keystone.contracts.shadows import Comparison, Shadow
from keystone.router.counts import LATENCY_BUCKETS, Counts, Outcome, merge_counts


def latency_columns(now_ms: Column, timestamp: Column) -> list[Column]:
    """Aggregates for a histogram of `now - timestamp` in seconds: cumulative bucket counts
    (`le_<bound>`), `latency_count` and `latency_sum`."""
    # Whole milliseconds against the bounds in milliseconds: integer comparisons, and the
    # same counts as seconds against seconds (every bound is a whole number of milliseconds).
    ms = now_ms - timestamp
    columns = [
        F.count_if(ms <= round(bound * 1000)).alias(f"le_{bound}") for bound in LATENCY_BUCKETS
    ]
    return [
        *columns,
        F.count(ms).alias("latency_count"),
        (F.coalesce(F.sum(ms), F.lit(0)) / 1000.0).alias("latency_sum"),
    ]


class LatencyHistogram(Collector):
    """A histogram fed whole batches of bucket counts (prometheus_client's own takes one
    observation at a time)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._series: dict[tuple[str, str], dict[str, float]] = {}

    def add(self, stream: str, output: str, counts: dict[str, float]) -> None:
        if not counts.get("latency_count"):
            return
        with self._lock:
            merge_counts(self._series.setdefault((stream, output), {}), counts)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(
            names.DELIVERY_LATENCY_SECONDS,
            "Sink time minus ingest time (ks_ts), seconds",
            labels=["stream", "output"],
        )
        with self._lock:
            for (stream, output), series in sorted(self._series.items()):
                buckets = [(str(b), series[f"le_{b}"]) for b in LATENCY_BUCKETS]
                buckets.append(("+Inf", series["latency_count"]))
                family.add_metric([stream, output], buckets, series["latency_sum"])
        yield family


class RouterMetrics:
    def __init__(self, stream: str, home: str = DEFAULT_CLUSTER) -> None:
        """`home`: the home fronting cluster's name, the `cluster` label of its queries."""
        self.stream = stream
        self.home = home
        self.registry = CollectorRegistry()
        self.events = Counter(
            names.ROUTER_EVENTS.removesuffix("_total"),
            "Events per output and stage",
            ["stream", "output", "stage"],
            registry=self.registry,
        )
        self.lag = Gauge(
            names.ROUTER_LAG,
            "Records behind the fronting topic's end, on each fronting cluster",
            ["stream", "output", "cluster"],
            registry=self.registry,
        )
        self.up = Gauge(
            names.ROUTER_UP,
            "1 while the router runs with every query running",
            ["stream"],
            registry=self.registry,
        )
        self.query_up = Gauge(
            names.ROUTER_QUERY_UP,
            "1 while the output's query on the fronting cluster runs (output '_stream': the "
            "dead-letter query)",
            ["stream", "output", "cluster"],
            registry=self.registry,
        )
        self.size = Gauge(
            names.ROUTER_SIZE,
            "The events per second the router's micro-batches are sized for now",
            ["stream"],
            registry=self.registry,
        )
        self.transactions = Counter(
            names.ROUTER_TRANSACTIONS.removesuffix("_total"),
            "An exactly-once output's Kafka transactions, committed or aborted",
            ["stream", "output", "outcome"],
            registry=self.registry,
        )
        self.latency = LatencyHistogram()
        self.registry.register(self.latency)
        self.shadow_events = Counter(
            names.SHADOW_EVENTS.removesuffix("_total"),
            "Events an output's shadow read, by what both versions made of each",
            ["stream", "output", "result"],
            registry=self.registry,
        )
        self.shadow_fields = Counter(
            names.SHADOW_FIELD_DIFFERENCES.removesuffix("_total"),
            "Events both versions keep whose records differ in the field (past the comparison's "
            "limit of fields, as '(other)')",
            ["stream", "output", "field"],
            registry=self.registry,
        )
        self.shadow_records = Counter(
            names.SHADOW_RECORDS.removesuffix("_total"),
            "Records of an output's shadow, delivered to its targets or dead-lettered",
            ["stream", "output", "stage"],
            registry=self.registry,
        )
        self.shadow_up = Gauge(
            names.SHADOW_UP,
            "1 while the output's shadow's query runs",
            ["stream", "output"],
            registry=self.registry,
        )
        self.shadow_lag = Gauge(
            names.SHADOW_LAG,
            "Records the output's shadow's query is behind home's fronting topic's end (it reads "
            "at most its rate)",
            ["stream", "output"],
            registry=self.registry,
        )
        self.shadows: dict[str, str] = {}  # the shadows whose queries are reported: their outputs
        self._server = None

    def declare(self, outputs: list[str], transactional: list[str]) -> None:
        """Every series this router will count, at 0 from the start: Prometheus can only see
        an increase (the first dead letter, say) from a value it saw before."""
        for output in outputs:
            for stage in names.ROUTER_STAGES:
                self.events.labels(self.stream, output, stage)
        for output in transactional:
            for outcome in names.TRANSACTION_OUTCOMES:
                self.transactions.labels(self.stream, output, outcome)
        self.events.labels(self.stream, STREAM_LEVEL, "dead_letter")

    def count(self, output: str, stage: str, n: float) -> None:
        if n:
            self.events.labels(self.stream, output, stage).inc(n)

    def metered(self, output: str, counts: Counts) -> None:
        self.count(output, "in", counts.read)
        self.count(output, "matched", counts.matched)
        self.count(output, "delivered", counts.delivered)
        self.count(output, "dead_letter", counts.dead_lettered)
        self.latency.add(self.stream, output, counts.latency)

    def outcome(self, output: str, outcome: Outcome) -> None:
        self.count(output, "delivered", outcome.delivered)
        self.count(output, "dead_letter", outcome.dead_lettered)
        for name, n in (("committed", outcome.transactions), ("aborted", outcome.aborted)):
            if n:
                self.transactions.labels(self.stream, output, name).inc(n)
        self.latency.add(self.stream, output, outcome.latency)

    def serve(self, settings: Settings, port: int = 0) -> int:
        """Serves /metrics on loopback (`port`, or any free one); returns the port. The fleet
        registers it with Prometheus."""
        self._server, _ = start_http_server(port, addr=settings.bind_host, registry=self.registry)
        self.up.labels(self.stream).set(0)
        return self._server.server_port

    def running(self, queries: dict[str, bool], idle: Collection[str] = ()) -> None:
        """Which of the router's queries run (by query key: an output's, or the stream's own,
        on a fronting cluster): it is up only while every one does but those `idle` (held on a
        standby cluster with nothing to read), so an output whose query cannot start is an
        alert, not a quiet gap in its deliveries."""
        for key, running in queries.items():
            output, cluster = split_key(key)
            self.query_up.labels(self.stream, output, cluster or self.home).set(int(running))
        needed = [running for key, running in queries.items() if key not in idle]
        self.up.labels(self.stream).set(1 if all(needed) else 0)

    def compared(self, output: str, before: Comparison, after: Comparison) -> None:
        """What a shadow's batch added to its comparison."""
        for result, n in after.totals.items():
            if n > before.totals.get(result, 0):
                self.shadow_events.labels(self.stream, output, result).inc(
                    n - before.totals.get(result, 0)
                )
        for field, n in after.fields.items():
            if n > before.fields.get(field, 0):
                self.shadow_fields.labels(self.stream, output, field).inc(
                    n - before.fields.get(field, 0)
                )
        for stage, was, now in (
            ("delivered", before.delivered, after.delivered),
            ("dead_letter", before.dead_lettered, after.dead_lettered),
        ):
            self.shadow_records.labels(self.stream, output, stage).inc(max(0, now - was))

    def shadows_running(self, shadows: dict[str, str], running: dict[str, bool]) -> None:
        """The shadows wanted now (their outputs, by shadow id), and which of their queries
        run; an output's whose shadow ended is no longer reported."""
        for output in set(self.shadows.values()) - set(shadows.values()):
            for gauge in (self.shadow_up, self.shadow_lag):
                with contextlib.suppress(KeyError):  # never set
                    gauge.remove(self.stream, output)
        for shadow, output in shadows.items():
            self.shadow_up.labels(self.stream, output).set(int(running.get(shadow, False)))
        self.shadows = dict(shadows)

    def sized(self, events_per_second: int) -> None:
        self.size.labels(self.stream).set(events_per_second)

    def close(self) -> None:
        self.up.labels(self.stream).set(0)
        if self._server is not None:
            self._server.shutdown()


def lag_of(latest: object, end: object) -> int | None:
    """Records between where a query has read to and the topic's end, over all partitions: a
    source's offsets as its progress's JSON has them, by topic, then partition."""
    if not isinstance(latest, dict) or not isinstance(end, dict):
        return None  # not known (yet)
    return sum(
        max(0, offset - end.get(topic, {}).get(partition, 0))
        for topic, partitions in latest.items()
        for partition, offset in partitions.items()
    )


class ProgressListener:
    """Turns each query's progress into metrics: queries are named `<stream>.<output>`; batch
    sinks' queries observe `read` (in) and `matched`, and the dead-letter query's rows written
    are its dead letters. Every query's lag.

    Spark's listener interface implemented here over py4j (`listen`), not through PySpark's
    `StreamingQueryListener`: that one converts every event field by field, dozens of calls back
    into the JVM, and for each observed metric looks a class up by its short name
    (`_jvm.PythonSQLUtils`), which py4j tries in each imported package first, every miss a
    search of every jar on the class path. In an idle router's JVM that was over half of the
    Java code's samples once it ran (JFR, 2026-11-28). This reads each progress as its JSON, in
    one call, and leaves the other events unread."""

    def __init__(self, metrics: RouterMetrics) -> None:
        self.metrics = metrics

    def onQueryStarted(self, jevent: object) -> None:
        pass

    def onQueryProgress(self, jevent: Any) -> None:
        self.progress(json.loads(jevent.progress().json()))

    def onQueryIdle(self, jevent: object) -> None:
        pass

    def onQueryTerminated(self, jevent: object) -> None:
        pass  # the supervisor logs why

    def progress(self, progress: dict[str, Any]) -> None:
        """One query's progress, as Spark's `StreamingQueryProgress.json` has it."""
        name, prefix = progress.get("name") or "", f"{self.metrics.stream}."
        if not name.startswith(prefix):
            return
        # Counts add up over an output's queries on every cluster; its lag is per cluster.
        output, cluster = split_key(name.removeprefix(prefix))
        m = self.metrics
        sources = progress.get("sources", [])
        lags = [lag_of(s.get("latestOffset"), s.get("endOffset")) for s in sources]
        lags = [lag for lag in lags if lag is not None]
        if Shadow.is_key(output):  # a shadow's query: its own lag, while it is wanted
            shadowed = m.shadows.get(output)
            for lag in lags if shadowed is not None else []:
                m.shadow_lag.labels(m.stream, shadowed).set(lag)
            return
        observed = progress.get("observedMetrics") or {}
        if "read" in observed:
            m.count(output, "in", observed["read"]["in"])
        if "matched" in observed:
            m.count(output, "matched", observed["matched"]["matched"])
        written = (progress.get("sink") or {}).get("numOutputRows", 0)
        if output == STREAM_LEVEL and written > 0:
            m.count(output, "dead_letter", written)
        for lag in lags:
            m.lag.labels(m.stream, output, cluster or m.home).set(lag)

    class Java:  # py4j: the Java interface this implements
        implements: ClassVar = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


def listen(spark: SparkSession, listener: ProgressListener) -> Any:
    """Adds `listener` to the session's streaming queries, as PySpark's `addListener` does
    with its own wrapper of a listener; what was added (the JVM's listener)."""
    gateway = spark.sparkContext._gateway
    assert gateway is not None
    ensure_callback_server_started(gateway)
    wrapper = gateway.jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper
    added = wrapper(listener)
    spark.streams._jsqm.addListener(added)
    return added
