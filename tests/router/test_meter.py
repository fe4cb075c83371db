"""The JVM meter counts an output's events, reports them while its task still runs, and its
counts only ever grow; after a batch action, once Spark's listeners have been told of its
tasks, it counts the whole action."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import ClassVar

import pytest
from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from keystone.router.counts import LATENCY_BUCKETS, latency_counts
from keystone.router.meter import BUCKETS, LATENCY_SUM_MS, Meter

# (keep, latency in seconds or None for no ingest time): latencies far from every bucket bound,
# so the seconds a slow machine takes between building the rows and handling them do not matter.
ROWS = [
    (True, -10.0),  # an ingest time in the future (a skewed clock): the lowest bucket
    (True, 20.0),
    (True, 100.0),
    (True, 400.0),  # beyond the last bound: only in the count
    (True, None),  # kept but without an ingest time: matched, not timed
    (False, 20.0),
    (None, 20.0),  # a filter's null keeps nothing
]


def test_meter_says_what_the_filter_keeps_and_counts_it(spark: SparkSession) -> None:
    meter = Meter(spark, "test.counts")
    now = int(time.time() * 1000)
    frame = spark.createDataFrame(
        [(keep, None if s is None else now - round(s * 1000)) for keep, s in ROWS],
        "keep boolean, ts long",
    )
    rows = frame.select("keep", meter.counted(F.col("keep"), F.col("ts")).alias("kept")).collect()
    assert [row.kept for row in rows] == [bool(row.keep) for row in rows]

    counts = meter.take_settled()
    timed = [s for keep, s in ROWS if keep and s is not None]
    expected = latency_counts(timed)
    assert (counts.read, counts.matched) == (len(ROWS), 5)
    assert {k: v for k, v in counts.latency.items() if k != "latency_sum"} == {
        k: float(v) for k, v in expected.items() if k != "latency_sum"
    }
    assert abs(counts.latency["latency_sum"] - expected["latency_sum"]) < 60  # the wall clock
    assert meter.take().read == 0  # what was taken is not counted again


def test_meter_counts_each_record_sent_as_delivered_or_dead_lettered(spark: SparkSession) -> None:
    meter = Meter(spark, "test.sent")
    fits = [True, False, True, None, True]  # None: a record of unknown size never goes out
    frame = spark.createDataFrame([(f,) for f in fits], "fits boolean")
    # Used three times, as a record sink's frame does: still counted once per record.
    sent = frame.withColumn("sent", meter.sent(F.col("fits")))
    rows = sent.select(*(F.col("sent").alias(f"use{i}") for i in range(3))).collect()
    assert [tuple(row) for row in rows] == [(bool(f),) * 3 for f in fits]
    counts = meter.take_settled()
    assert (counts.delivered, counts.dead_lettered, counts.read) == (3, 2, 0)


def test_meter_reports_a_running_task_before_it_ends(spark: SparkSession) -> None:
    meter = Meter(spark, "test.running")
    slow = F.udf(lambda x: (time.sleep(0.05), x)[1], "long")  # 200 rows: a task of 10 s or more
    frame = spark.range(0, 200, 1, 1).where(meter.counted(F.lit(True), F.lit(None).cast("long")))
    job = threading.Thread(target=frame.select(slow("id")).collect)
    job.start()
    seen = 0
    while job.is_alive() and seen < 200:
        seen += meter.take().read
        time.sleep(0.2)
    running = job.is_alive()
    job.join()
    assert seen == 200 and running, "the meter's counts arrived only when the task ended"


class Totals:
    """Stands in for the JVM meter's running totals (pure logic: what `take` makes of them)."""

    def __init__(self, *totals: list[int]) -> None:
        self.totals_seen = list(totals)

    def totals(self) -> list[int]:
        return self.totals_seen.pop(0)


def test_take_counts_only_what_goes_past_the_highest_total_seen() -> None:
    slots = BUCKETS + len(LATENCY_BUCKETS) + 1

    def totals(read: int, matched: int) -> list[int]:
        row = [0] * slots
        row[0], row[1], row[LATENCY_SUM_MS], row[BUCKETS] = read, matched, matched, matched
        return row

    meter = Meter.__new__(Meter)
    # A running task's partial counts (5, 3), lost when it fails (2, 1), its events read again.
    meter._meter = Totals(totals(5, 3), totals(2, 1), totals(7, 4))
    meter._seen = [0] * slots
    taken = [meter.take() for _ in range(3)]
    assert [(c.read, c.matched) for c in taken] == [(5, 3), (0, 0), (2, 1)]
    assert [c.latency["latency_count"] for c in taken] == [3, 0, 1]
    assert taken[2].latency["le_0.005"] == 1 and taken[2].latency["latency_sum"] == 0.001


class SlowListener:
    """A Spark listener, in Python through Py4J, that takes half a second over each task's end:
    a driver busy enough that the listeners, the meter's among them, lag behind the tasks."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        if not name.startswith("on"):
            raise AttributeError(name)
        return self._slowly if name == "onTaskEnd" else (lambda *args: None)

    @staticmethod
    def _slowly(*args: object) -> None:
        time.sleep(0.5)

    class Java:
        implements: ClassVar = ["org.apache.spark.scheduler.SparkListenerInterface"]


@pytest.fixture
def lagging_listeners(spark: SparkSession) -> Iterator[None]:
    ensure_callback_server_started(spark.sparkContext._gateway)
    listener = SlowListener()
    context = spark.sparkContext._jsc.sc()
    context.addSparkListener(listener)
    yield
    context.removeSparkListener(listener)


def test_after_a_batch_action_the_meter_counts_all_of_it(
    spark: SparkSession, lagging_listeners: None
) -> None:
    """A backfill's slice of 204 events was once counted as 2 read: the action had returned,
    and the meter's listener had yet to hear of its tasks' ends."""
    meter = Meter(spark, "test.settled")
    frame = spark.range(1_000).repartition(3)
    kept = frame.select(meter.counted(F.col("id") % 2 == 0, F.lit(None).cast("long")))
    for _ in range(2):
        kept.write.mode("overwrite").format("noop").save()
        counts = meter.take_settled()
        assert (counts.read, counts.matched) == (1_000, 500)
