"""An output's live counts, from the JVM meter (router/java/RouterMeter.java).

Spark reports a query's observed metrics when its epoch ends: under Real-time Mode that is the
checkpoint interval, a minute or more. Outputs written by Spark's Kafka sink are counted by the
meter instead, a JVM function on the per-event path that counts into accumulators; running
tasks send those to the driver with every executor heartbeat, so the counts are seconds old
whatever the interval. Batch sinks keep their per-batch counts: what they deliver is known only
per batch too, and their matched and delivered counts should move together.
"""

from __future__ import annotations

from pyspark.sql import Column, SparkSession

from keystone.router.counts import LATENCY_BUCKETS, Counts

# The meter's slots, as in RouterMeter.java.
IN, MATCHED, DELIVERED, DEAD_LETTERED, LATENCY_SUM_MS, BUCKETS = range(6)


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
        self._seen = [0] * (BUCKETS + len(bounds) + 1)

    def counted(self, keep: Column, timestamp: Column) -> Column:
        """`keep` (a filter's condition), true or false, counted: every event read, those kept,
        and the latency of those kept (now minus `timestamp`, epoch ms) as the query handles
        them."""
        return Column(self._meter.counted(keep._jc, timestamp._jc))

    def sent(self, fits: Column) -> Column:
        """`fits`, counted: true as delivered, false as dead-lettered."""
        return Column(self._meter.sent(fits._jc))

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
