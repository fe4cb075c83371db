"""An output's shadow in the router (`contracts.shadows`): one more query, which reads the
fronting topic from where the live output had got to, applies both versions of the output to
every event (the live one and the shadow's, compiled as the live query compiles them), writes
the shadow's records to the shadow's targets through its sink's own writer, and counts what
became of each event in the shadow's comparison file.

The comparison is made in Spark, no Python per event: two records are equal when every
top-level field holds the same JSON value (the order of fields aside, numbers by value), else
they differ in the fields that do not (`differing_fields`). Each batch, kept in memory
meanwhile, is counted by one aggregation (by minute, result and differing field), a few of its
differing records are taken as samples, then the shadow's records are written: about what one
more output in micro-batches costs, each batch's jobs a fixed cost however few its events
(hence batches 10 s apart at the least, `router.plan.shadow_plan`), and the shadow reads at most
its rate's worth of events a second, whatever the stream's traffic.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from keystone.contracts.shadows import BatchComparison, Comparison, Difference, Result, ShadowBounds
from keystone.contracts.spec import OutputSpec
from keystone.router import compiled
from keystone.router.counts import Outcome
from keystone.router.meter import Meter
from keystone.router.metrics import RouterMetrics
from keystone.router.sinks.base import ROUTED, Writer

log = logging.getLogger(__name__)

_FIELDS = "map<string,variant>"  # a record's top-level fields, each value as it is typed
SAMPLE_CHARS = 500  # of a value in a sample: the comparison file stays small, whatever the records


def differing_fields(live: Column, shadow: Column) -> Column:
    """The top-level fields (sorted) in which two records (JSON text) differ: one has it and
    the other not, or their values differ as JSON (numbers by value, objects whatever their
    fields' order)."""
    left, right = F.from_json(live, _FIELDS), F.from_json(shadow, _FIELDS)
    fields = F.array_distinct(F.concat(F.map_keys(left), F.map_keys(right)))
    return F.array_sort(
        F.filter(fields, lambda f: ~F.equal_null(F.to_json(left[f]), F.to_json(right[f])))
    )


def field_values(live: Column, shadow: Column, fields: Column) -> Column:
    """For each of `fields`: the field, and its value in each record as JSON text (null where
    the record has no such field), its first `SAMPLE_CHARS` characters."""
    left, right = F.from_json(live, _FIELDS), F.from_json(shadow, _FIELDS)

    def text(value: Column) -> Column:
        return F.substring(F.to_json(value), 1, SAMPLE_CHARS)

    return F.transform(
        fields,
        lambda f: F.struct(
            f.alias("field"), text(left[f]).alias("live"), text(right[f]).alias("shadow")
        ),
    )


def compared(
    source: DataFrame, live: OutputSpec, shadow: OutputSpec, key: bytes | None
) -> DataFrame:
    """Every event of the source (`router.source` columns), with the columns of `ROUTED`
    (`record`: the shadow's record, null where it leaves the event out), `live_record` (the
    live output's, likewise), `result` (a `Result`) and `diff` (`differing_fields`, for the
    events both keep)."""
    readable = F.col("problem").isNull()
    live_keeps = readable & compiled.condition(live, key)
    shadow_keeps = readable & compiled.condition(shadow, key)
    frame = source.select(
        *ROUTED[:-3],
        F.lit(None).cast("string").alias("replay"),
        F.when(shadow_keeps, compiled.record(shadow, key)).alias("record"),
        F.lit(None).cast("string").alias("dead_letter"),
        F.when(live_keeps, compiled.record(live, key)).alias("live_record"),
        readable.alias("readable"),
        live_keeps.alias("live_keeps"),
        shadow_keeps.alias("shadow_keeps"),
    )
    both = F.col("live_keeps") & F.col("shadow_keeps")
    frame = frame.withColumn(
        "diff", F.when(both, differing_fields(F.col("live_record"), F.col("record")))
    )
    result = (
        F.when(~F.col("readable"), F.lit(Result.UNREADABLE.value))
        .when(both & (F.size("diff") == 0), F.lit(Result.EQUAL.value))
        .when(both, F.lit(Result.DIFFERING.value))
        .when(F.col("live_keeps"), F.lit(Result.ONLY_LIVE.value))
        .when(F.col("shadow_keeps"), F.lit(Result.ONLY_SHADOW.value))
        .otherwise(F.lit(Result.NEITHER.value))
    )
    return frame.withColumn("result", result).drop("readable", "live_keeps", "shadow_keeps")


class ShadowBatches:
    """The shadow's query's batches (`foreachBatch`): each compared, its records delivered,
    then counted into the comparison file, once (`Comparison.add`)."""

    def __init__(
        self,
        *,
        output: str,
        writer: Writer,
        meter: Meter | None,
        comparison: Path,
        bounds: ShadowBounds,
        metrics: RouterMetrics,
    ) -> None:
        self.output = output
        self.writer = writer
        self.meter = meter
        self.path = comparison
        self.bounds = bounds
        self.metrics = metrics
        self.busy = False  # a batch under way (a stop that timed out may leave one going)

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        self.busy = True
        try:
            self._batch(frame, batch_id)
        finally:
            self.busy = False

    def _batch(self, frame: DataFrame, batch_id: int) -> None:
        rows = frame.persist()
        try:
            compared_batch = counted(rows, self.bounds.samples)
            records = rows.where(F.col("record").isNotNull()).select(*ROUTED)
            outcome = self.writer.deliver(self.writer.frame(records), batch_id)
        finally:
            rows.unpersist()
        if outcome is None:  # the writer's meter counted it
            assert self.meter is not None, "a writer that counts nothing itself has a meter"
            metered = self.meter.take_settled()
            outcome = Outcome(delivered=metered.delivered, dead_lettered=metered.dead_lettered)
        batch = compared_batch.model_copy(
            update={"delivered": outcome.delivered, "dead_lettered": outcome.dead_lettered}
        )
        before = Comparison.load(self.path)
        after = before.add(batch_id, batch, self.bounds, time.time())
        if after is not before:
            after.save(self.path)
            self.metrics.compared(self.output, before, after)


def counted(rows: DataFrame, samples: int) -> BatchComparison:
    """A batch's events (`compared`'s rows) by ingest minute and result, the fields its
    differing records differ in, and the first `samples` of those."""
    now_ms = F.unix_millis(F.current_timestamp())
    minute = F.floor(F.coalesce(F.col("timestamp"), now_ms) / 60_000).alias("minute")
    is_differing = F.col("result") == Result.DIFFERING.value
    # One aggregation: a row per event, or per field for an event whose records differ
    # (the row of its first field counts the event).
    exploded = rows.select(
        minute,
        "result",
        F.posexplode_outer(F.when(is_differing, F.col("diff"))).alias("pos", "field"),
    )
    groups = exploded.groupBy("minute", "result", "field").agg(
        F.count(F.lit(1)).alias("rows"),
        F.count(F.when(F.coalesce(F.col("pos"), F.lit(0)) == 0, 1)).alias("events"),
    )
    minutes: dict[int, dict[Result, int]] = {}
    fields: dict[str, int] = {}
    for row in groups.collect():
        into = minutes.setdefault(int(row["minute"]), {})
        result = Result(row["result"])
        into[result] = into.get(result, 0) + int(row["events"])
        if row["field"] is not None:
            fields[row["field"]] = fields.get(row["field"], 0) + int(row["rows"])
    differing = rows.where(is_differing)
    found = []
    if samples and fields:
        values = field_values(F.col("live_record"), F.col("record"), F.col("diff"))
        for row in (
            differing.select("guid", "timestamp", values.alias("values")).limit(samples).collect()
        ):
            found.append(
                Difference(
                    guid=row["guid"] or "",
                    timestamp=row["timestamp"] or 0,
                    fields={v["field"]: (v["live"], v["shadow"]) for v in row["values"]},
                )
            )
    return BatchComparison(minutes=minutes, fields=fields, samples=found)
