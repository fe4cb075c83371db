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


JSON_SPACE = " \t\n\r"


def envelope(frame: DataFrame, schema: dict[str, Any] | None = None) -> DataFrame:
    # One pass over the headers into a map (reversed, so that with the session's LAST_WIN
    # policy the first of a repeated header wins), and the text read once.
    text = F.col("value").cast("string")
    entries = F.coalesce("headers", F.array().cast("array<struct<key:string,value:binary>>"))
    read = frame.select(
        "key",
        "value",
        "headers",
        "topic",
        "partition",
        "offset",
        F.try_parse_json(text).alias("payload"),
        # An object parses and starts with '{' (cheaper than asking the variant its schema).
        F.ltrim(text, F.lit(JSON_SPACE)).startswith("{").alias("is_object"),
        F.map_from_entries(F.reverse(entries)).alias("meta"),
    )

    def meta(name: str) -> Column:
        return F.col("meta")[name].cast("string")

    payload, timestamp = F.col("payload"), meta(headers.TIMESTAMP).try_cast("long")
    problem = (
        F.when(payload.isNull(), "not JSON")
        .when(~F.col("is_object"), "not a JSON object")
        .when(meta(headers.GUID).isNull(), f"no {headers.GUID} header")
        .when(timestamp.isNull(), f"no {headers.TIMESTAMP} header of epoch milliseconds")
    )
    if schema is not None:
        mismatch = schema_problem(payload, schema)
        problem = problem.when(mismatch.isNotNull(), mismatch)
    return read.select(
        "key",
        "value",
        "headers",
        "topic",
        "partition",
        "offset",
        "payload",
        meta(headers.GUID).alias("guid"),
        timestamp.alias("timestamp"),
        meta(headers.HOST).alias("host"),
        meta(headers.APP).alias("app"),
        F.coalesce(meta(headers.HOPS).try_cast("int"), F.lit(0)).alias("hops"),
        problem.alias("problem"),
    )
