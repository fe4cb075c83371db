"""A shadow's comparison, Column by Column (`router.shadow.compared`): for generated events and
pairs of versions of an output, Spark's result for each event, and the fields its records differ
in, are what the Python evaluator's records of both versions say (an independent oracle: the
language's other backend, and JSON values compared in Python). The router's whole shadow, on
the real stack: tests/control/test_shadows.py."""

from __future__ import annotations

import json
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from keystone.contracts.shadows import Result
from keystone.contracts.spec import OutputSpec
from keystone.router.lang.evaluate import matches, project
from keystone.router.lang.parser import parse_filter, parse_projection
from keystone.router.shadow import compared, counted, field_values
from tests.support.frames import KEY, frame
from tests.support.json_values import same

# Versions of one output, live then shadow: a field renamed, one hashed, a filter changed, the
# projection's order changed (the same records), the whole event against chosen fields.
PAIRS = [
    (("n > 1", ["guid", "n", "user.id as user_id"]), ("n > 1", ["guid", "n", "user.id as uid"])),
    (
        (None, ["n", "user.id as user_id", "country"]),
        (None, ["n", "hash(user.id) as user_id", "country"]),
    ),
    (("country = 'US'", ["*"]), ("country in ('US', 'CA')", ["*"])),
    ((None, ["n", "country"]), (None, ["country", "n"])),
    (("n >= 2", ["*"]), ("n <= 3", ["n", "user", "country", "flag"])),
]
USERS = st.fixed_dictionaries({}, optional={"id": st.integers(1, 3) | st.sampled_from(["1", "x"])})
EVENTS = st.fixed_dictionaries(
    {},
    optional={
        "n": st.integers(0, 4) | st.sampled_from([2.0, "2", None]),
        "user": USERS | st.none(),
        "country": st.sampled_from(["US", "CA", "FR"]),
        "flag": st.booleans() | st.sampled_from([0, 1]),
    },
)


def output(version: tuple[str | None, list[str]]) -> OutputSpec:
    condition, projection = version
    return OutputSpec.model_validate(
        {"name": "out", "filter": condition, "projection": projection, "sink": {"type": "kafka"}}
    )


def expected(live: OutputSpec, shadow: OutputSpec, event: dict, meta: dict) -> tuple:
    """The oracle: the result, and the fields the records differ in."""
    keeps = [
        matches(parse_filter(o.filter) if o.filter else None, event, meta, KEY)
        for o in (live, shadow)
    ]
    if not any(keeps):
        return Result.NEITHER, None
    if not all(keeps):
        return (Result.ONLY_LIVE if keeps[0] else Result.ONLY_SHADOW), None
    a, b = (project(parse_projection(o.projection), event, meta, KEY) for o in (live, shadow))
    missing = object()
    diff = sorted(k for k in a.keys() | b.keys() if not same(a.get(k, missing), b.get(k, missing)))
    return (Result.DIFFERING if diff else Result.EQUAL), diff


def spark_results(
    spark: SparkSession, live: OutputSpec, shadow: OutputSpec, rows: list[tuple[dict, dict]]
) -> list[tuple]:
    reads = [
        *(parse_filter(o.filter) for o in (live, shadow) if o.filter),
        *(parse_projection(o.projection) for o in (live, shadow)),
    ]
    found = compared(frame(spark, rows, *reads), live, shadow, KEY).select("result", "diff")
    return [(Result(r["result"]), r["diff"]) for r in found.collect()]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(EVENTS, min_size=1, max_size=12), st.sampled_from(range(len(PAIRS))))
def test_spark_compares_as_the_python_evaluator(
    spark: SparkSession, events: list[dict], pair: int
) -> None:
    live, shadow = (output(v) for v in PAIRS[pair])
    rows = [(e, {"guid": str(uuid.uuid4()), "timestamp": 1}) for e in events]
    assert spark_results(spark, live, shadow, rows) == [
        expected(live, shadow, e, m) for e, m in rows
    ]


def test_each_result_and_the_differing_values(spark: SparkSession) -> None:
    """One event of each result, and a differing record's values before and after, as text."""
    live = output(("n > 0", ["n", "user.id as user_id", "country"]))
    shadow = output(("n < 3", ["country", "n", "user.id as uid"]))
    meta = {"guid": "g", "timestamp": 1}
    rows = [
        ({"n": 1, "user": {"id": 7}, "country": "US"}, meta),  # both: user_id against uid
        ({"n": 2, "country": "US"}, meta),  # both, and no user: the same records
        ({"n": 5, "user": {"id": 7}}, meta),  # the live output only
        ({"n": 0}, meta),  # the shadow only
        ({"n": "x"}, meta),  # neither: 'x' is no number
    ]
    assert [r for r, _ in spark_results(spark, live, shadow, rows)] == [
        Result.DIFFERING,
        Result.EQUAL,
        Result.ONLY_LIVE,
        Result.ONLY_SHADOW,
        Result.NEITHER,
    ]
    reads = [parse_filter("n > 0"), parse_filter("n < 3"), parse_projection(live.projection)]
    reads.append(parse_projection(shadow.projection))
    rows_frame = compared(frame(spark, rows[:1], *reads), live, shadow, KEY)
    values = rows_frame.select(field_values(F.col("live_record"), F.col("record"), F.col("diff")))
    [[found]] = values.collect()
    assert [(v["field"], v["live"], v["shadow"]) for v in found] == [
        ("uid", None, "7"),
        ("user_id", "7", None),
    ]
    assert json.loads(rows_frame.first()["record"]) == {"country": "US", "n": 1, "uid": 7}


def test_a_batch_is_counted_by_minute_result_and_field(spark: SparkSession) -> None:
    """`counted`, over `compared`'s rows: each event once in its minute's result, each field
    a differing event differs in once, and samples of the differing ones."""
    live = output(("n > 0", ["n", "user.id as user_id", "country"]))
    shadow = output(("n < 3", ["n", "user.id as uid", "hash(country) as country"]))
    rows = [
        ({"n": 1, "user": {"id": 7}, "country": "US"}, {"guid": "a", "timestamp": 60_000}),
        ({"n": 2}, {"guid": "b", "timestamp": 60_001}),  # only n: the same records
        ({"n": 2, "country": "CA"}, {"guid": "c", "timestamp": 120_000}),  # country hashed
        ({"n": 5}, {"guid": "d", "timestamp": 120_001}),  # the live output's only
    ]
    reads = [parse_filter("n > 0"), parse_filter("n < 3")]
    reads += [parse_projection(o.projection) for o in (live, shadow)]
    found = counted(compared(frame(spark, rows, *reads), live, shadow, KEY), samples=5)
    assert found.minutes == {
        1: {Result.DIFFERING: 1, Result.EQUAL: 1},
        2: {Result.DIFFERING: 1, Result.ONLY_LIVE: 1},
    }
    assert found.fields == {"country": 2, "uid": 1, "user_id": 1}
    assert sorted(s.guid for s in found.samples) == ["a", "c"]
    assert counted(compared(frame(spark, rows, *reads), live, shadow, KEY), 0).samples == []
