"""Events as the router reads them, in a local Spark session: for the language's and the
router's Column-level tests."""

from __future__ import annotations

import json
from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from keystone.contracts.envelope import METADATA
from keystone.router.lang.ast import METADATA as NAMES
from keystone.router.lang.ast import Expr, Projection, paths_read
from keystone.router.lang.parser import parse_filter
from keystone.router.lang.spark import Scope, compile_filter
from keystone.router.source import envelope

# The key `hash` uses in the language's tests.
KEY = b"the stream's key"

# The records of Spark's Kafka source.
KAFKA = (
    "key binary, value binary, headers array<struct<key:string,value:binary>>, "
    "topic string, partition int, offset long"
)


def frame(
    spark: SparkSession, rows: list[tuple[dict, dict]], *read: Expr | Projection | None
) -> DataFrame:
    """Events (with their metadata) read as the router reads them (`router.source.envelope`):
    `payload` (the field paths that the filters and projections in `read` use), the metadata
    from the headers, `value` (the text), and `whole` (the event as one VARIANT, what the Avro
    check reads)."""
    records = [
        (None, json.dumps(e).encode(), [(METADATA[n], str(v).encode()) for n, v in m.items()])
        for e, m in rows
    ]
    kafka = spark.createDataFrame([(*r, "t", 0, i) for i, r in enumerate(records)], KAFKA)
    # In their order: a local list's rows come back as given (no shuffle in between; a sort
    # by offset cost each example a stage).
    events = envelope(kafka, paths=paths_read(*read))
    events = events.withColumn("value", F.col("value").cast("string"))
    return events.withColumn("whole", F.parse_json("value"))


def at_once(
    spark: SparkSession,
    rows: list[tuple[dict, dict]],
    read: Sequence[Expr | Projection],
    columns: Sequence[Column],
) -> list[list[object]]:
    """Each column's values over the rows (a list per column), from one Spark job over a frame
    of what all of `read` read: a case table run a job per case spent most of its time
    starting jobs (a second each on a busy machine)."""
    selected = frame(spark, rows, *read).select(*(c.alias(f"c{i}") for i, c in enumerate(columns)))
    found = selected.collect()
    return [[row[f"c{i}"] for row in found] for i in range(len(columns))]


def kept_at_once(
    spark: SparkSession, event: dict, metadata: dict, filters: Sequence[str]
) -> dict[str, object]:
    """What Spark keeps of the event for each filter's text, every one in one job."""
    exprs = {text: parse_filter(text) for text in filters}
    columns = [compile_filter(e, scope()) for e in exprs.values()]
    values = at_once(spark, [(event, metadata)], list(exprs.values()), columns)
    return {text: kept for text, [kept] in zip(exprs, values, strict=True)}


def scope(key: bytes | None = KEY) -> Scope:
    """What a frame's expressions compile against (needs the session: built in each test)."""
    return Scope(F.col("payload"), {name: F.col(name) for name in NAMES}, key)
