"""The router's one source seam: a stream's fronting topic as the columns every output uses.

`fronting()` reads Spark's Kafka source, streaming (the router) or as a batch (backfills,
rewinds, tests), and `envelope()` turns records into: `payload`, the event's top-level fields
that the reader asks for, each a VARIANT; the metadata from the headers; and `problem`, the
reason a record cannot be routed (not JSON, not an object, no guid or ingest time, not matching
the stream's Avro schema: it then goes to the dead-letter topic), or null. Anything that yields
these columns can feed the same outputs and sinks.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType, VariantType

from contracts import envelope as headers
from contracts.names import fronting_topic
from contracts.settings import Settings
from router.avro import schema_problem
from router.lang.spark import variant_path


def fronting(
    spark: SparkSession,
    settings: Settings,
    stream: str,
    *,
    streaming: bool = True,
    starting: str = "latest",
    max_per_trigger: int | None = None,
    schema: dict[str, Any] | None = None,
    fields: Collection[str] = (),
) -> DataFrame:
    """`starting` applies to a query's first run only; later runs resume from the checkpoint.
    `max_per_trigger` bounds a micro-batch (catching up after an outage, say); `schema`, the
    stream's parsed Avro schema, dead-letters the events that do not match it; `fields` are the
    payload's top-level names the reader uses."""
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
    return envelope(reader.load(), schema, fields)


JSON_SPACE = " \t\n\r"
CORRUPT = "ks-corrupt"  # not a name the language admits, so never one of the event's fields
# The parser as strict as JSON itself (Spark's defaults admit 'quotes' and NaN).
STRICT_JSON = {
    "columnNameOfCorruptRecord": CORRUPT,
    "allowSingleQuotes": "false",
    "allowNonNumericNumbers": "false",
}


def parse_fields(text: Column, fields: Collection[str]) -> Column:
    """A struct of the event's top-level `fields`, each a VARIANT (SQL NULL when absent, a
    variant null for a JSON null), and CORRUPT, set when the text is not a JSON object. Only
    these fields become variants: the parser skips the rest of the event, which is what makes
    this cheaper than parsing the whole event into one VARIANT."""
    schema = StructType(
        [StructField(name, VariantType()) for name in sorted(fields)]
        + [StructField(CORRUPT, StringType())]
    )
    return F.from_json(text, schema, STRICT_JSON)


def envelope(
    frame: DataFrame, schema: dict[str, Any] | None = None, fields: Collection[str] = ()
) -> DataFrame:
    """`fields`: the top-level names the reader's filter and projection use (`payload` holds
    those). With an Avro `schema` the whole event is parsed, to check it."""
    # One pass over the headers into a map (reversed, so that with the session's LAST_WIN
    # policy the first of a repeated header wins), and the text read once.
    text = F.col("value").cast("string")
    entries = F.coalesce("headers", F.array().cast("array<struct<key:string,value:binary>>"))
    whole = F.try_parse_json(text) if schema is not None else None
    if whole is None:
        payload = parse_fields(text, fields)
    else:
        payload = F.struct(
            *(
                F.variant_get(whole, variant_path((name,)), "variant").alias(name)
                for name in sorted(fields)
            ),
            F.when(whole.isNull(), text).alias(CORRUPT),
        )
    read = frame.select(
        "key",
        "value",
        "headers",
        "topic",
        "partition",
        "offset",
        payload.alias("payload"),
        *([] if whole is None else [whole.alias("whole")]),
        # An object starts with '{' (cheaper than asking a parsed event its type); trimming
        # copies the text, so only text that does not start with it at once is trimmed.
        F.when(text.startswith("{"), F.lit(True))
        .otherwise(F.ltrim(text, F.lit(JSON_SPACE)).startswith("{"))
        .alias("is_object"),
        F.map_from_entries(F.reverse(entries)).alias("meta"),
    )

    def meta(name: str) -> Column:
        return F.col("meta")[name].cast("string")

    timestamp = meta(headers.TIMESTAMP).try_cast("long")
    problem = (
        # Rare: only then is the text parsed again, to tell JSON that is not an object.
        F.when(
            ~F.coalesce("is_object", F.lit(False)),
            F.when(F.try_parse_json(text).isNull(), "not JSON").otherwise("not a JSON object"),
        )
        .when(F.col("payload")[CORRUPT].isNotNull(), "not JSON")
        .when(meta(headers.GUID).isNull(), f"no {headers.GUID} header")
        .when(timestamp.isNull(), f"no {headers.TIMESTAMP} header of epoch milliseconds")
    )
    if schema is not None:
        mismatch = schema_problem(F.col("whole"), schema)
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
