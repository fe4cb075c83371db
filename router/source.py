"""The router's one source seam: a stream's fronting topic as the columns every output uses.

`fronting()` reads Spark's Kafka source, streaming (the router) or as a batch (backfills,
rewinds, tests), and `envelope()` turns records into: the payload as a VARIANT, the metadata from
the headers, and `problem`, the reason a record cannot be routed (not JSON, not an object, no
guid or ingest time, not matching the stream's Avro schema: it then goes to the dead-letter
topic), or null. Anything that yields these columns can feed the same outputs and sinks.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from contracts import envelope as headers
from contracts.names import fronting_topic
from contracts.settings import Settings
from router.avro import schema_problem


def fronting(
    spark: SparkSession,
    settings: Settings,
    stream: str,
    *,
    streaming: bool = True,
    starting: str = "latest",
    max_per_trigger: int | None = None,
    schema: dict[str, Any] | None = None,
) -> DataFrame:
    """`starting` applies to a query's first run only; later runs resume from the checkpoint.
    `max_per_trigger` bounds a micro-batch (catching up after an outage, say); `schema`, the
    stream's parsed Avro schema, dead-letters the events that do not match it."""
    reader = (
        (spark.readStream if streaming else spark.read)
        .format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
        .option("subscribe", fronting_topic(stream))
        .option("includeHeaders", "true")
        .option("startingOffsets", starting)
    )
    if max_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", max_per_trigger)
    return envelope(reader.load(), schema)


def header(name: str) -> Column:
    """The first header of that name as text, null when absent."""
    found = F.filter("headers", lambda h: h["key"] == F.lit(name))
    return F.get(found, 0)["value"].cast("string")


def envelope(frame: DataFrame, schema: dict[str, Any] | None = None) -> DataFrame:
    payload = F.try_parse_json(F.col("value").cast("string"))
    timestamp = header(headers.TIMESTAMP).try_cast("long")
    problem = (
        F.when(payload.isNull(), "not JSON")
        .when(~F.schema_of_variant(payload).startswith("OBJECT"), "not a JSON object")
        .when(header(headers.GUID).isNull(), f"no {headers.GUID} header")
        .when(timestamp.isNull(), f"no {headers.TIMESTAMP} header of epoch milliseconds")
    )
    if schema is not None:
        mismatch = schema_problem(payload, schema)
        problem = problem.when(mismatch.isNotNull(), mismatch)
    return frame.select(
        "key",
        "value",
        "headers",
        "topic",
        "partition",
        "offset",
        payload.alias("payload"),
        header(headers.GUID).alias("guid"),
        timestamp.alias("timestamp"),
        header(headers.HOST).alias("host"),
        header(headers.APP).alias("app"),
        F.coalesce(header(headers.HOPS).try_cast("int"), F.lit(0)).alias("hops"),
        problem.alias("problem"),
    )
