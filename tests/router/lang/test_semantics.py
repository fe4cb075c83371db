"""What filters mean, case by case, in both backends: the language's specification."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from keystone.contracts.limits import HARD_MAX_EXPRESSION_DEPTH
from keystone.router.lang.ast import Expr, paths_read
from keystone.router.lang.evaluate import matches, project
from keystone.router.lang.parser import parse_filter, parse_projection
from keystone.router.lang.spark import compile_filter, compile_projection
from keystone.router.source import envelope
from tests.support.frames import KAFKA, frame, kept_at_once, scope

EVENT = {
    "country": "US",
    "device": {"type": "tv", "tags": ["a"]},
    "n": 5,
    "d": 1.5,
    "ok": True,
    "none": None,
    "s5": "5",
    "big": 123456789012345678901234567890,
    "name": "50%_off\n",
    "huge": 10**400,  # beyond a double
    "emoji": "a😀b",  # an astral character: one code point, two UTF-16 units
}
META = {"guid": "g-1", "timestamp": 1700000000000, "host": "proxy-1", "app": "player"}
CASES = [
    ("country = 'US'", True),
    ("country in ('CA', 'US')", True),
    ("country not in ('CA', 'US')", False),
    # `in` is the OR of equalities: a null or another type in the list is an unknown one...
    ("n in (5, null)", True),
    ("n in (4, null)", False),
    ("not n in (4, null)", False),  # ...so not found there is unknown, not false
    ("n not in (4, 'x')", False),
    ("n not in (4, 6)", True),
    ("n in ('5', 5.0)", True),  # as doubles
    ("big in (1.2345678901234568e29)", True),
    ("huge in (1e400)", True),
    ("ok in (false, true)", True),
    ("ok not in (false)", True),
    ("missing in (1, null)", False),
    ("not missing in (1)", False),
    ("device in ('tv')", False),
    ("none not in (1)", False),
    ("5 in (4, 5)", True),  # a constant operand too
    ("device.type != 'test'", True),
    ("n > 4.5 and n <= 5", True),
    ("d = 1.5", True),
    ("big > 1e29", True),
    ("huge > 1e308 and not huge < 0", True),
    ("n < 1" + "0" * 310, True),  # a constant beyond a double: infinite in both
    ("huge = 1" + "0" * 400, True),
    ("n = '5'", False),  # a type mismatch is unknown...
    ("not n = '5'", False),  # ...and so is its negation
    ("s5 = 5", False),
    ("missing = 1", False),
    ("not missing = 1", False),
    ("missing is null", True),
    ("none is null", True),
    ("none = null", False),  # compare with null: unknown; use `is null`
    ("country is not null", True),
    ("device = 'tv'", False),  # objects compare with nothing
    ("ok", True),
    ("not ok", False),
    ("country", False),  # a bare non-boolean is unknown
    ("missing = 1 or country = 'US'", True),  # unknown or true
    ("missing = 1 and country = 'US'", False),  # unknown and true
    # A chain is a balanced tree: the same meaning, however it is grouped.
    ("missing = 1 or n = 4 or country = 'CA' or ok or d = 2", True),
    ("n = 5 and ok and missing = 1 and d = 1.5 and country = 'US'", False),
    ("not (missing = 1 and country = 'CA')", True),  # not (unknown and false)
    ("name like '50\\%\\_off%'", True),  # escaped % and _, then % runs across the newline
    ("name like '50%'", True),
    ("name like '5_%off_'", True),
    ("n like '5'", False),  # like applies to strings only
    ("not n like '5'", False),
    ("emoji like 'a_b'", True),  # `_` is one code point
    ("emoji like 'a__b'", False),
    ("emoji like '%😀%'", True),
    ("app = 'player' and timestamp > 1600000000000 and host like 'proxy-%'", True),
    ("guid = 'g-2'", False),
    ("AND_ = 1 Or country = 'US'", True),  # keywords in any case...
    ("Country = 'US'", False),  # ...names are case-sensitive, at every level
    ("Country is null and country = 'US'", True),
    ("device.Type is null and device.type = 'tv'", True),
    ("country < 'V' and country >= 'US'", True),  # strings in code point order
    ("ok = true and false = false", True),
    # A path through a value that is not an object is missing; the rest is read all the same.
    ("country.code is null and n = 5", True),
    ("device.tags.x is null and device.type = 'tv'", True),
    ("device.type.x is null and device.type = 'tv'", True),
]


@pytest.fixture(scope="module")
def kept_by_spark(spark: SparkSession) -> dict[str, object]:
    return kept_at_once(spark, EVENT, META, [text for text, _ in CASES])


@pytest.mark.parametrize(("text", "keeps"), CASES)
def test_both_backends_mean_the_same(
    kept_by_spark: dict[str, object], text: str, keeps: bool
) -> None:
    assert matches(parse_filter(text), EVENT, META) is keeps
    assert kept_by_spark[text] is keeps


def both(spark: SparkSession, expr: Expr, rows: list[tuple[dict, dict]]) -> list[bool]:
    """What each backend keeps of the rows: checked to agree, returned."""
    kept = [
        row["keep"]
        for row in frame(spark, rows, expr)
        .select(compile_filter(expr, scope()).alias("keep"))
        .collect()
    ]
    assert kept == [matches(expr, event, meta) for event, meta in rows]
    return kept


# Events that make `in` true, false and unknown: found, not found, another type, missing.
MEMBERS = [({"x": 2999}, META), ({"x": 3000}, META), ({"x": "7"}, META), ({}, META)]


def test_an_in_list_of_thousands_is_flat_in_both_backends(spark: SparkSession) -> None:
    values = ", ".join(str(i) for i in range(3000))
    assert both(spark, parse_filter(f"x in ({values})"), MEMBERS) == [True, False, False, False]
    assert both(spark, parse_filter(f"x not in ({values})"), MEMBERS) == [
        False,
        True,
        False,
        False,
    ]
    # A string among the numbers: a number not found is unknown (so is its negation).
    mixed = parse_filter(f"x not in ({values}, '7')")
    assert both(spark, mixed, MEMBERS) == [False, False, False, False]
    assert both(spark, parse_filter(f"x in ({values}, '7')"), MEMBERS) == [
        True,
        False,
        True,
        False,
    ]


def test_the_deepest_nesting_the_structural_limit_allows_runs_in_both_backends(
    spark: SparkSession,
) -> None:
    half = HARD_MAX_EXPRESSION_DEPTH // 2
    expr = parse_filter("not (" * half + "x = 3000" + ")" * half)  # an even number of 'not's
    assert both(spark, expr, MEMBERS) == [False, True, False, False]


def test_no_filter_keeps_everything() -> None:
    assert matches(None, {}, {})


def test_a_projection_renames_and_leaves_out_what_is_missing(spark: SparkSession) -> None:
    projection = parse_projection(
        ["guid", "timestamp", "device.type as kind", "none", "missing", "big"]
    )
    expected = {
        "guid": "g-1",
        "timestamp": 1700000000000,
        "kind": "tv",
        "none": None,
        "big": 123456789012345678901234567890,
    }
    assert project(projection, EVENT, META) == expected
    [row] = (
        frame(spark, [(EVENT, META)], projection)
        .select(compile_projection(projection, F.col("value"), scope()).alias("out"))
        .collect()
    )
    assert json.loads(row["out"]) == expected


def test_star_keeps_the_event_text_as_it_is(spark: SparkSession) -> None:
    [row] = (
        frame(spark, [(EVENT, META)])
        .select(compile_projection(parse_projection(["*"]), F.col("value"), scope()).alias("out"))
        .collect()
    )
    assert row["out"] == json.dumps(EVENT)


def test_a_projected_value_is_its_text_in_the_event(spark: SparkSession) -> None:
    # Exactly what the producer wrote: no number normalised, an integer beyond 38 digits exact,
    # escapes and spacing kept; metadata escaped as JSON requires.
    text = (
        '{"d": 1.50, "e": 1E2, "huge": 1234567890123456789012345678901234567890123,'
        ' "s": "caf\\u00e9 \\"q\\"", "o": {"x": [1, 2], "y": null}}'
    )
    headers = [("ks_guid", b'g-"1'), ("ks_ts", b"1700000000000")]
    projection = parse_projection(["d", "e", "huge", "s", "o", "guid", "timestamp", "host"])
    events = envelope(
        spark.createDataFrame([(b"k", text.encode(), headers, "t", 0, 0)], KAFKA),
        paths=paths_read(projection),
    )
    record = compile_projection(projection, F.col("value"), scope())
    [row] = events.select(record.alias("out")).collect()
    assert row["out"] == (
        '{"d":1.50,"e":1E2,"huge":1234567890123456789012345678901234567890123,'
        '"s":"caf\\u00e9 \\"q\\"","o":{"x": [1, 2], "y": null},'
        '"guid":"g-\\"1","timestamp":1700000000000}'
    )
    meta = {"guid": 'g-"1', "timestamp": 1700000000000}
    assert json.loads(row["out"]) == project(projection, json.loads(text), meta)
