"""The router's one source seam: a stream's fronting topic as the columns every output uses.

`fronting()` reads Spark's Kafka source, streaming (the router) or as a batch (backfills,
rewinds, tests), and `envelope()` turns records into: `payload`, the values at the field paths
the reader asks for, each a VARIANT; the metadata from the headers; and `problem`, the
reason a record cannot be routed (not JSON, not an object, no guid or ingest time, not matching
the stream's Avro schema: it then goes to the dead-letter topic), or null. Anything that yields
these columns can feed the same outputs and sinks.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType, VariantType

from contracts import envelope as headers
from contracts.names import fronting_topic
from contracts.settings import Settings
from router.avro import schema_problem
from router.lang.ast import dotted


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
) -> DataFrame:
    """`starting` applies to a query's first run only; later runs resume from the checkpoint.
    `max_per_trigger` bounds a micro-batch (catching up after an outage, say); `schema`, the
    stream's parsed Avro schema, dead-letters the events that do not match it; `paths` are the
    payload's field paths the reader uses."""
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
    return envelope(reader.load(), schema, paths)


JSON_SPACE = " \t\n\r"
CORRUPT = "ks-corrupt"  # not a name the language admits, so never one of the event's fields
# The parser as strict as JSON itself (Spark's defaults admit 'quotes' and NaN).
STRICT_JSON = {
    "columnNameOfCorruptRecord": CORRUPT,
    "allowSingleQuotes": "false",
    "allowNonNumericNumbers": "false",
}


Tree = dict[str, "Tree | None"]  # a name read whole maps to None


def shape(paths: Collection[tuple[str, ...]]) -> Tree:
    """The paths as a tree of names: a name read whole is a leaf, one read only through longer
    paths holds the tree of those."""
    tree: Tree = {}
    for path in sorted(paths, key=len):  # a shorter path first: it covers the longer ones
        node: Tree | None = tree
        for name in path[:-1]:
            node = node.setdefault(name, {})
            if node is None:
                break
        else:
            node[path[-1]] = None
    return tree


def top_level(paths: Collection[tuple[str, ...]]) -> frozenset[tuple[str, ...]]:
    """The top-level names the paths start in, as paths that read them whole."""
    return frozenset(path[:1] for path in paths)


def _schema(tree: Tree) -> StructType:
    return StructType(
        [
            StructField(name, VariantType() if sub is None else _schema(sub))
            for name, sub in sorted(tree.items())
        ]
    )


def parse_tree(text: Column, tree: Tree) -> Column:
    """The text parsed with the tree's shape: each leaf a VARIANT (SQL NULL when absent, a
    variant null for a JSON null), each inner name a struct of its children; and CORRUPT, set
    when the text is not a JSON object, a leaf's value cannot be a VARIANT, or a value is not of
    the shape (not an object where the tree reads into one). The parser skips all else, which is
    what makes reading only the paths a reader uses cheaper than whole values as VARIANTs."""
    return F.from_json(text, _schema(tree).add(StructField(CORRUPT, StringType())), STRICT_JSON)


def _variant_at(parsed: Column, tree: Tree, path: tuple[str, ...]) -> Column:
    """The VARIANT at `path` in a struct parsed with the tree's shape."""
    node: Tree | None = tree
    for depth, name in enumerate(path):
        parsed, node = parsed[name], node[name]
        if node is None:
            return _variant_get(parsed, path[depth + 1 :])
    raise ValueError(f"{dotted(path)} is not in the tree")


def _variant_get(value: Column, path: tuple[str, ...]) -> Column:
    # Names are [A-Za-z_][A-Za-z0-9_]* (the parser admits nothing else), so the path is plain.
    return F.variant_get(value, "$." + dotted(path), "variant") if path else value


def _struct(
    paths: Collection[tuple[str, ...]], read: Callable[[tuple[str, ...]], Column]
) -> Column:
    return F.struct(*(read(path).alias(dotted(path)) for path in sorted(paths)))


def parse(text: Column, paths: Collection[tuple[str, ...]]) -> tuple[Column, Column]:
    """The text parsed with the paths' shape and, only where that parse says CORRUPT (a value
    not of the shape, such as `user` a string where `user.id` is read; or not JSON at all),
    parsed again by the top-level names the paths start in. Both in one projection: Spark
    evaluates the shaped parse once for both (a common subexpression), and a projection with a
    `from_json` in it runs outside the code Spark generates for the rest of the query."""
    shaped = parse_tree(text, shape(paths))
    again = parse_tree(text, shape(top_level(paths)))
    return shaped, F.when(shaped[CORRUPT].isNotNull(), again)


def payload(
    parsed: Column, again: Column, paths: Collection[tuple[str, ...]]
) -> tuple[Column, Column]:
    """The payload, a struct of one VARIANT for each path named by the dotted path, and whether
    the event is readable (JSON, and its values at the paths VARIANTs), from `parse`'s two
    columns. Where the shaped parse says CORRUPT the paths are read from the top-level VARIANTs:
    what a path through a value that is not an object, or a repeated key, reads then is what the
    Python evaluator reads."""
    tree, top = shape(paths), shape(top_level(paths))
    shaped = parsed[CORRUPT].isNull()
    value = F.when(shaped, _struct(paths, lambda path: _variant_at(parsed, tree, path)))
    value = value.otherwise(_struct(paths, lambda path: _variant_at(again, top, path)))
    return value, shaped | again[CORRUPT].isNull()


def envelope(
    frame: DataFrame,
    schema: dict[str, Any] | None = None,
    paths: Collection[tuple[str, ...]] = (),
) -> DataFrame:
    """`paths`: the payload's field paths the reader's filter and projection use (`payload`
    holds those). With an Avro `schema` the whole event is parsed, to check it."""
    # JSON's names, and the language's, are case-sensitive: `user.id` and `user.ID` are two
    # paths, so two fields of the parse and of the payload, which Spark by default resolves
    # regardless of case (and so calls ambiguous). Set here, for every reader of a payload.
    frame.sparkSession.conf.set("spark.sql.caseSensitive", "true")
    # One pass over the headers into a map (reversed, so that with the session's LAST_WIN
    # policy the first of a repeated header wins), and the text read once.
    text = F.col("value").cast("string")
    entries = F.coalesce("headers", F.array().cast("array<struct<key:string,value:binary>>"))
    if schema is None:
        shaped, again = parse(text, paths)
        parsed = [shaped.alias("parsed"), again.alias("again")]
    else:
        parsed = [F.try_parse_json(text).alias("parsed")]
    read = frame.select(
        "key",
        "value",
        "headers",
        "topic",
        "partition",
        "offset",
        *parsed,
        # An object starts with '{' (cheaper than asking a parsed event its type); trimming
        # copies the text, so only text that does not start with it at once is trimmed.
        F.when(text.startswith("{"), F.lit(True))
        .otherwise(F.ltrim(text, F.lit(JSON_SPACE)).startswith("{"))
        .alias("is_object"),
        F.map_from_entries(F.reverse(entries)).alias("meta"),
    )
    if schema is None:
        value, readable = payload(F.col("parsed"), F.col("again"), paths)
    else:
        value = _struct(paths, lambda path: _variant_get(F.col("parsed"), path))
        readable = F.col("parsed").isNotNull()

    def meta(name: str) -> Column:
        return F.col("meta")[name].cast("string")

    timestamp = meta(headers.TIMESTAMP).try_cast("long")
    problem = (
        # Rare: only then is the text parsed again, to tell JSON that is not an object.
        F.when(
            ~F.coalesce("is_object", F.lit(False)),
            F.when(F.try_parse_json(text).isNull(), "not JSON").otherwise("not a JSON object"),
        )
        .when(~readable, "not JSON")
        .when(meta(headers.GUID).isNull(), f"no {headers.GUID} header")
        .when(timestamp.isNull(), f"no {headers.TIMESTAMP} header of epoch milliseconds")
    )
    if schema is not None:
        mismatch = schema_problem(F.col("parsed"), schema)
        problem = problem.when(mismatch.isNotNull(), mismatch)
    return read.select(
        "key",
        "value",
        "headers",
        "topic",
        "partition",
        "offset",
        value.alias("payload"),
        meta(headers.GUID).alias("guid"),
        timestamp.alias("timestamp"),
        meta(headers.HOST).alias("host"),
        meta(headers.APP).alias("app"),
        F.coalesce(meta(headers.HOPS).try_cast("int"), F.lit(0)).alias("hops"),
        problem.alias("problem"),
    )
