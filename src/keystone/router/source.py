"""The router's one source seam: a stream's fronting topic as the columns every output uses.

`fronting()` reads Spark's Kafka source, streaming (the router) or as a batch (backfills,
rewinds, tests), and `envelope()` turns records into: `payload`, the values at the field paths
the reader asks for, each its JSON type and text (`read_paths`); the metadata from the headers;
and `problem`, the reason a record cannot be routed (not JSON, not an object, no guid or ingest
time, not matching the stream's Avro schema: it then goes to the dead-letter topic), or null;
and, for an output's query that writes the stream's dead letters too, `stream_problem`: the
reason, over every path any output reads. Anything that yields these columns can feed the same
outputs and sinks.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from keystone.contracts import envelope as headers
from keystone.contracts import kafka_clients
from keystone.contracts.envelope import JSON_SPACE
from keystone.contracts.fronting import FrontingCluster
from keystone.contracts.names import fronting_topic
from keystone.contracts.settings import Settings
from keystone.router.avro import schema_problem
from keystone.router.lang.ast import dotted

LENIENT = "?"  # before JsonPaths' paths: a lone surrogate leaves only its own path unreadable
UNREADABLE = "unreadable"  # a lenient read's kind of such a path
HEADERS = "array<struct<key:string,value:binary>>"  # a Kafka record's, as Spark reads them
# The headers an event's metadata comes from.
META = (headers.GUID, headers.TIMESTAMP, headers.HOST, headers.APP, headers.HOPS)


def record_headers() -> Column:
    """The record's `headers`, an empty array where it has none."""
    return F.coalesce("headers", F.array().cast(HEADERS))


def first_headers(spark: SparkSession, names: Collection[str]) -> Column:
    """The record's first value of each named header, as bytes (a struct with a field per name,
    null where it has none), in one pass over its headers (router/java/FirstHeaders.java):
    Kafka keeps a repeated header, and the first is the one the proxy wrote. `names`: distinct,
    none empty or holding a comma (they reach the JVM comma-separated)."""
    if not names or len(set(names)) != len(names) or any(not n or "," in n for n in names):
        raise ValueError(f"header names must be distinct, without commas: {list(names)}")
    jvm = spark.sparkContext._jvm
    return Column(jvm.FirstHeaders.column(record_headers()._jc, ",".join(names)))


def fronting(
    spark: SparkSession,
    settings: Settings,
    stream: str,
    *,
    streaming: bool = True,
    starting: str = "latest",
    max_per_trigger: int | None = None,
    schema: dict[str, Any] | None = None,
    paths: Collection[tuple[str, ...]] = (),
    checked: Collection[tuple[str, ...]] | None = None,
    cluster: FrontingCluster | None = None,
    starting_at: int | None = None,
) -> DataFrame:
    """`starting` applies to a query's first run only; later runs resume from the checkpoint.
    `cluster`: the fronting cluster to read (home by default); `starting_at`: instead of
    `starting`, the first record of each partition at or after that time (epoch ms).
    `max_per_trigger` bounds a micro-batch (catching up after an outage, say); `schema`, the
    stream's parsed Avro schema, dead-letters the events that do not match it; `paths` are the
    payload's field paths the reader uses; `checked`, every path of the stream's, for a reader
    that writes its dead letters too (`envelope`)."""
    records = kafka_records(
        spark,
        settings,
        stream,
        streaming=streaming,
        starting=starting,
        max_per_trigger=max_per_trigger,
        cluster=cluster,
        starting_at=starting_at,
    )
    return envelope(records, schema, paths, checked)


def kafka_records(
    spark: SparkSession,
    settings: Settings,
    stream: str,
    *,
    streaming: bool = True,
    starting: str = "latest",
    max_per_trigger: int | None = None,
    cluster: FrontingCluster | None = None,
    starting_at: int | None = None,
) -> DataFrame:
    """The fronting topic's records as Spark's Kafka source gives them (key, value, headers,
    topic, partition, offset, timestamp...) on `cluster` (home by default): committed ones
    only, where another stream's exactly-once Keystone output writes to it in transactions
    (the proxy's are not). Only the source reads that cluster: sinks write where they do."""
    connection = cluster.connect(settings) if cluster is not None else settings
    reader = (
        (spark.readStream if streaming else spark.read)
        .format("kafka")
        .options(**kafka_clients.spark_options(connection))
        .option("kafka.isolation.level", "read_committed")
        .option("subscribe", fronting_topic(stream))
        .option("includeHeaders", "true")
        .option("startingOffsets", starting)
    )
    if starting_at is not None:  # Spark's precedence: over startingOffsets
        reader = reader.option("startingTimestamp", str(starting_at))
        # A partition with no record since: from its end, not an error.
        reader = reader.option("startingOffsetsByTimestampStrategy", "latest")
    if max_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", max_per_trigger)
    # Never `minPartitions` nor `maxRecordsPerPartition`: each task then holds one whole
    # partition of a batch, which an exactly-once output's transactions rely on (its tasks
    # skip what their partition's committed position says is written).
    return reader.load()


def read_paths(
    spark: SparkSession,
    value: Column,
    paths: Collection[tuple[str, ...]],
    *,
    lenient: bool = False,
) -> Column:
    """The event's bytes (`value`) read at the field paths, in one streaming pass of the JVM's
    JSON tokenizer (router/java/JsonPaths.java): a struct with a field per dotted path, each a
    struct of `kind` (string, number, boolean, null, object, array or missing), `json` (the
    value's own text, null when missing) and `string` (a string's decoded value). Null when the
    bytes are not a JSON object or a string read holds an escaped lone surrogate; `lenient`,
    such a string is only its own path's `kind` `unreadable`. Values at no path are skipped,
    never built."""
    dotted_paths = ",".join(sorted(dotted(path) for path in paths))
    argument = f"{LENIENT}{dotted_paths}" if lenient else dotted_paths
    return Column(spark.sparkContext._jvm.JsonPaths.column(value._jc, argument))


def envelope(
    frame: DataFrame,
    schema: dict[str, Any] | None = None,
    paths: Collection[tuple[str, ...]] = (),
    checked: Collection[tuple[str, ...]] | None = None,
) -> DataFrame:
    """`paths`: the payload's field paths the reader's filter and projection use (`payload`
    holds those, `read_paths`). With an Avro `schema` the whole event is parsed too, to check
    it. `checked`: every path the stream's outputs read, for a reader that writes the stream's
    dead letters too: `stream_problem` says why the stream cannot read an event, in the same
    pass (`payload` then holds these paths too, read leniently)."""
    # JSON's names, and the language's, are case-sensitive: `user.id` and `user.ID` are two
    # paths, so two fields of the payload, which Spark by default resolves regardless of case
    # (and so calls ambiguous). Set here, for every reader of a payload.
    frame.sparkSession.conf.set("spark.sql.caseSensitive", "true")
    text = F.col("value").cast("string")
    whole = [] if schema is None else [F.try_parse_json(text).alias("whole")]
    lenient = checked is not None
    read_at = set(paths) | set(checked or ())
    read = frame.select(
        "key",
        "value",
        "headers",
        "topic",
        "partition",
        "offset",
        read_paths(frame.sparkSession, F.col("value"), read_at, lenient=lenient).alias("payload"),
        *whole,
        first_headers(frame.sparkSession, META).alias("meta"),
    )

    def meta(name: str) -> Column:
        return F.col("meta")[name].cast("string")

    timestamp = meta(headers.TIMESTAMP).try_cast("long")
    # Rare: only an event the payload cannot be read from is parsed again, to tell JSON that
    # is not an object (an object the payload cannot be read from holds a lone surrogate).
    is_object = F.ltrim(text, F.lit(JSON_SPACE)).startswith("{")

    def problem_at(at: Collection[tuple[str, ...]]) -> Column:
        """Why the event cannot be read at these paths, or null."""
        unreadable = F.col("payload").isNull()
        if lenient:  # a lone surrogate where these read (strict: the whole payload is null)
            for path in at:
                unreadable = unreadable | (F.col("payload")[dotted(path)]["kind"] == UNREADABLE)
        problem = (
            F.when(
                unreadable,
                F.when(is_object | F.try_parse_json(text).isNull(), "not JSON").otherwise(
                    "not a JSON object"
                ),
            )
            .when(meta(headers.GUID).isNull(), f"no {headers.GUID} header")
            .when(timestamp.isNull(), f"no {headers.TIMESTAMP} header of epoch milliseconds")
        )
        if schema is not None:
            mismatch = schema_problem(F.col("whole"), schema)
            problem = problem.when(mismatch.isNotNull(), mismatch)
        return problem

    stream_problem = [] if checked is None else [problem_at(read_at).alias("stream_problem")]
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
        problem_at(paths).alias("problem"),
        *stream_problem,
    )
