"""An output's live counts, from the JVM meter (router/java/RouterMeter.java).

Spark reports a query's observed metrics when its epoch ends: under Real-time Mode that is the
checkpoint interval, a minute or more. Outputs written by Spark's Kafka sink are counted by the
meter instead, a JVM function on the per-event path that counts into accumulators; running
tasks send those to the driver with every executor heartbeat, so the counts are seconds old
whatever the interval. Batch sinks keep their per-batch counts: what they deliver is known only
per batch too, and their matched and delivered counts should move together.
"""

from __future__ import annotations

import logging

from py4j.protocol import Py4JJavaError
from pyspark.sql import Column, SparkSession

from keystone.router.counts import LATENCY_BUCKETS, Counts

log = logging.getLogger(__name__)

# The meter's slots, as in RouterMeter.java.
IN, MATCHED, DELIVERED, DEAD_LETTERED, LATENCY_SUM_MS, BUCKETS = range(6)
SETTLE_MS = 60_000  # at most, for Spark's listeners to be told of an action's tasks


class Meter:
    """One output's meter, for the router's whole life: a query started again after a failure
    counts on into the same accumulators."""

    def __init__(self, spark: SparkSession, name: str) -> None:
        sc = spark.sparkContext
        bounds = [round(bound * 1000) for bound in LATENCY_BUCKETS]
        array = sc._gateway.new_array(sc._gateway.jvm.long, len(bounds))
        for i, bound in enumerate(bounds):
            array[i] = bound
        self._meter = sc._jvm.RouterMeter.create(sc._jsc.sc(), name, array)
        self._bus = sc._jsc.sc().listenerBus()
        self._seen = [0] * (BUCKETS + len(bounds) + 1)

    def counted(self, keep: Column, timestamp: Column) -> Column:
        """`keep` (a filter's condition), true or false, counted: every event read, those kept,
        and the latency of those kept (now minus `timestamp`, epoch ms) as the query handles
        them."""
        return Column(self._meter.counted(keep._jc, timestamp._jc))

    def sent(self, fits: Column) -> Column:
        """`fits`, counted: true as delivered, false as dead-lettered."""
        return Column(self._meter.sent(fits._jc))

    def dead_lettered(self, dead: Column) -> Column:
        """`dead`, counted: true as dead-lettered (the stream's dead letters an output's query
        writes beside its records)."""
        return Column(self._meter.deadLettered(dead._jc))

    def take_settled(self) -> Counts:
        """`take`, after a batch action (a backfill's slice, a redrive's). Spark tells its
        listeners, the meter's among them, of the action's finished tasks on a thread of their
        own, after the action has returned: until then a finished task counts as much as its
        last heartbeat said (a backfill's slice of 204 events once counted 2 read)."""
        try:
            self._bus.waitUntilEmpty(SETTLE_MS)
        except Py4JJavaError as e:  # a listener that hangs: counted as far as it got
            log.warning("Spark's listeners not told of every task in %d ms: %s", SETTLE_MS, e)
        return self.take()

    def take(self) -> Counts:
        """The counts since the last call. A task that fails takes its partial counts with it
        and its events are read again, so a total can fall back: only what goes past the
        highest total seen is new."""
        totals = list(self._meter.totals())
        new = [max(0, total - seen) for total, seen in zip(totals, self._seen, strict=True)]
        self._seen = [max(total, seen) for total, seen in zip(totals, self._seen, strict=True)]
        buckets = new[BUCKETS:]
        latency = {
            f"le_{bound}": float(sum(buckets[: i + 1])) for i, bound in enumerate(LATENCY_BUCKETS)
        }
        latency["latency_count"] = float(sum(buckets))
        latency["latency_sum"] = new[LATENCY_SUM_MS] / 1000.0
        return Counts(new[IN], new[MATCHED], new[DELIVERED], new[DEAD_LETTERED], latency)
