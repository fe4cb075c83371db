"""The Spark schema check agrees with the proxy's (fastavro): for generated events and a set of
schemas covering every Avro type, an event is dead-lettered exactly when the proxy would have
refused it, and the reason names the field."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from keystone.contracts.schema import parse_schema, schema_problems
from keystone.router.avro import schema_problem
from tests.support.frames import frame

SCHEMAS = [
    {
        "type": "record",
        "name": "Play",
        "namespace": "ks",
        "fields": [
            {"name": "title", "type": "string"},
            {"name": "n", "type": "int"},
            {"name": "big", "type": ["null", "long"], "default": None},
            {"name": "score", "type": {"type": "double"}, "default": 0.0},
            {"name": "ok", "type": "boolean", "default": True},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["a", "b"]}},
        ],
    },
    {
        "type": "record",
        "name": "Nested",
        "fields": [
            {
                "name": "user",
                "type": {
                    "type": "record",
                    "name": "User",
                    "fields": [
                        {"name": "id", "type": "long"},
                        {"name": "tags", "type": {"type": "array", "items": "string"}},
                    ],
                },
            },
            {"name": "friends", "type": {"type": "array", "items": "User"}, "default": []},
            {"name": "attrs", "type": {"type": "map", "values": ["null", "float"]}},
            {"name": "blob", "type": ["null", "bytes"], "default": None},
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        ],
    },
    {
        "type": "record",
        "name": "Optional",
        "namespace": "ks",
        "fields": [
            {
                "name": "user",
                "type": [
                    "null",
                    {
                        "type": "record",
                        "name": "User",
                        "fields": [
                            {"name": "id", "type": "long"},
                            {"name": "tags", "type": {"type": "array", "items": "string"}},
                        ],
                    },
                ],
            },
            {
                "name": "attrs",
                "type": [
                    "null",
                    {"type": "record", "name": "P", "fields": [{"name": "p", "type": "float"}]},
                    {"type": "record", "name": "Q", "fields": [{"name": "q", "type": "string"}]},
                ],
                "default": None,
            },
        ],
    },
]
KEYS = [
    "title",
    "n",
    "big",
    "score",
    "ok",
    "kind",
    "user",
    "id",
    "tags",
    "friends",
    "attrs",
    "blob",
    "ts",
    "-type",
]
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64)
    | st.integers(-3, 3)
    | st.sampled_from([2**31, -(2**31) - 1, 2**63, 1.0, 1.5])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(["a", "b", "c", "ks.Play", "Nested", "User"])
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner),
    max_leaves=10,
)
EVENTS = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=7)
# Events built to be near misses of each schema, so matches are frequent too.
USER = st.fixed_dictionaries(
    {"id": st.integers(-3, 3), "tags": st.lists(st.sampled_from(["x", "y"]), max_size=2)},
    optional={"extra": SCALARS},
)
NEAR = st.fixed_dictionaries(
    {
        "title": st.sampled_from(["t", 1]),
        "n": st.sampled_from([1, 2**31, 1.0]),
        "kind": st.sampled_from(["a", "c"]),
        "user": USER,
        "attrs": st.dictionaries(st.sampled_from(["p", "q"]), st.none() | st.floats(-9, 9)),
        "ts": st.integers(0, 2**40),
    },
    optional={
        "big": st.none() | st.integers(0, 9),
        "score": st.integers(0, 9) | st.floats(0, 1),
        "friends": st.lists(USER, max_size=2),
        "ok": st.booleans(),
    },
)


# Few examples of many events each: every example costs a Spark job per schema.
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(events=st.lists(EVENTS | NEAR, min_size=80, max_size=80))
def test_dead_lettered_exactly_when_the_proxy_refuses(
    spark: SparkSession, events: list[dict]
) -> None:
    for raw in SCHEMAS:
        parsed = parse_schema(raw)
        rows = frame(spark, [(e, {}) for e in events])
        problems = [r[0] for r in rows.select(schema_problem(rows.whole, parsed)).collect()]
        for event, problem in zip(events, problems, strict=True):
            expected = schema_problems(event, parsed)
            assert (problem is None) == (not expected), (raw["name"], event, problem, expected)


def test_the_reason_names_the_innermost_field_at_fault(spark: SparkSession) -> None:
    parsed = parse_schema(SCHEMAS[1])
    event = {"user": {"id": "seven", "tags": []}, "attrs": {}, "ts": 1}
    rows = frame(spark, [(event, {})])
    [(problem,)] = rows.select(schema_problem(rows.whole, parsed)).collect()
    assert problem == "does not match the stream's schema at user.id"
