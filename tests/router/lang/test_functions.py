"""What the functions mean, case by case, in both backends: the table is the language's
specification of every function over JSON's types, missing fields and nulls. Each case is a
projected item `EXPR as v`: the record holds `v` with the value given, or leaves it out
(MISSING)."""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from keystone.router.lang.ast import MISSING, REDACTED, paths_read
from keystone.router.lang.evaluate import matches, project
from keystone.router.lang.parser import parse_filter, parse_projection
from keystone.router.lang.spark import Scope, compile_projection
from keystone.router.source import envelope
from tests.support.frames import KAFKA, KEY, at_once, frame, kept_at_once, scope

EVENT = {
    "country": "US",
    "name": "  Ana María\t",
    "greek": "ΟΔΟΣ",
    "dotted": "İstanbul",
    "sharp": "straße",
    "emoji": "a😀b",
    "card": "4111111111111111",
    "short": "12",
    "n": 5,
    "d": 1.5,
    "big": 123456789012345678901234567890,
    "huge": 10.0**300,
    "ok": True,
    "none": None,
    "obj": {"x": 1},
    "arr": [1, 2],
    "num_s": " 42 ",
    "float_s": "4.20",
    "exp_s": "1E2",
    "bad_s": "4,2",
    "lead_s": "007",
    "inf_s": "1e400",
    "t_s": "TRUE",
    "one_s": "1",
    "iso": "2026-11-26T10:00:00.123456Z",
    "iso_offset": "2026-11-26T10:00:00-01:30",
    "iso_no_zone": "2026-11-26T10:00:00",
    "iso_feb30": "2026-02-30T10:00:00Z",
    "iso_year0": "0000-01-01T00:00:00Z",
    "iso_leap": "2024-02-29T23:59:59.9Z",
    "epoch_s": 1700000000,
    "epoch_ms": 1700000000123.9,
    "far": 1e20,
    "separated": "5\u2028",
    "newer": "\ua7cb",
    "newer_small": "\u0264",  # Java's `$` matches before a final line separator: `\z` does not
}
META = {"guid": "g-1", "timestamp": 1700000000000, "host": "proxy-1", "app": "player"}


def hashed(text: str) -> str:
    """The oracle: HMAC-SHA256 by Python's own hmac, not the language's code."""
    return hmac.new(KEY, text.encode(), hashlib.sha256).hexdigest()


CASES = [
    # Hygiene. hash: a value's text, keyed; a number's text is its digits or shortest form.
    ("hash(country)", hashed("US")),
    ("hash(n)", hashed("5")),
    ("hash(to_string(n))", hashed("5")),  # 5 and '5' hash alike
    ("hash(d)", hashed("1.5")),
    ("hash(big)", hashed("123456789012345678901234567890")),
    ("hash(ok)", hashed("true")),
    ("hash(none)", None),
    ("hash(obj)", None),  # objects and arrays have no text
    ("hash(missing)", MISSING),
    ("hash(guid)", hashed("g-1")),
    ("hash(timestamp)", hashed("1700000000000")),
    # mask: all but the last N characters (code points), all of a value no longer than N.
    ("mask(card, 4)", "************1111"),
    ("mask(short, 4)", "**"),
    ("mask(emoji, 1)", "**b"),
    ("mask(emoji, 0)", "***"),
    ("mask(n, 0)", "*"),
    ("mask(ok, 1)", "***e"),  # a boolean's text too
    ("mask(none, 1)", None),
    ("mask(missing, 1)", MISSING),
    # redact: any value, null too, becomes the marker; a missing field stays missing.
    ("redact(card)", REDACTED),
    ("redact(none)", REDACTED),
    ("redact(obj)", REDACTED),
    ("redact(missing)", MISSING),
    # Normalising.
    ("lower(country)", "us"),
    ("lower(greek)", "\u03bf\u03b4\u03bf\u03c3"),  # character by character: no final sigma
    ("lower(newer)", "\ua7cb"),  # as Python's tables say (ICU's, newer, would lower it)
    ("upper(newer_small)", "\u0264"),
    ("lower(dotted)", "i\u0307stanbul"),  # a dotted capital I: i and a combining dot
    ("upper(sharp)", "STRASSE"),
    ("upper(n)", None),
    ("trim(name)", "Ana María"),  # JSON's whitespace: space, tab, newline, return
    ("trim(none)", None),
    ("length(emoji)", 3),
    ("length(name)", 12),
    ("length(arr)", None),
    ("coalesce(missing, none, country)", "US"),
    ("coalesce(none, missing)", None),
    ("coalesce(missing, missing.x)", MISSING),
    ("coalesce(obj, 1)", {"x": 1}),
    ("coalesce(missing, 'default')", "default"),
    ("to_number(num_s)", 42),
    ("to_number(float_s)", 4.2),
    ("to_number(exp_s)", 100.0),
    ("to_number(d)", 1.5),
    ("to_number(big)", 123456789012345678901234567890),
    ("to_number(bad_s)", None),
    ("to_number(lead_s)", None),  # not a JSON number
    ("to_number(inf_s)", None),  # beyond a double
    ("to_number(ok)", None),
    ("to_number(separated)", None),
    ("to_string(to_number(separated))", None),
    ("to_string(n)", "5"),
    ("to_string(d)", "1.5"),
    ("to_string(far)", "1e+20"),
    ("to_string(n / 4)", "1.25"),
    ("to_string(n * 2)", "10.0"),  # computed numbers are doubles
    ("to_string(ok)", "true"),
    ("to_string(obj)", None),
    ("to_bool(t_s)", True),
    ("to_bool(one_s)", True),
    ("to_bool(n - 5)", False),
    ("to_bool(n)", None),
    ("to_bool(country)", None),
    ("to_timestamp(iso, 'iso8601')", 1795687200123),  # the fraction read to the millisecond
    ("to_timestamp(iso_offset, 'iso8601')", 1795692600000),
    ("to_timestamp(iso_leap, 'iso8601')", 1709251199900),
    ("to_timestamp(iso_no_zone, 'iso8601')", None),  # a time without a zone is no moment
    ("to_timestamp(iso_feb30, 'iso8601')", None),
    ("to_timestamp(iso_year0, 'iso8601')", None),
    ("to_timestamp(n, 'iso8601')", None),
    ("to_timestamp(epoch_s, 'epoch_s')", 1700000000000),
    ("to_timestamp(epoch_ms, 'epoch_ms')", 1700000000123),  # floored
    ("to_timestamp(huge, 'epoch_ms')", None),  # past year 9999
    ("to_timestamp(country, 'epoch_s')", None),
    # Computed.
    ("concat(country, '-', n, '-', ok)", "US-5-true"),
    ("concat(country, none)", None),
    ("concat(country, missing)", MISSING),
    ("concat(country, obj)", None),
    ("substring(country, 1, 1)", "U"),
    ("substring(emoji, 2, 1)", "😀"),
    ("substring(country, 2, 100)", "S"),
    ("substring(country, 5, 1)", ""),
    ("substring(country, 0, 1)", None),  # 1 is the first character
    ("substring(country, 1.5, 1)", None),
    ("substring(country, 1, 1e19)", "US"),  # past 2^63: a whole number all the same
    ("substring(country, 1e19, 1)", ""),
    ("substring(country, 1, -1)", None),
    ("date_of(timestamp)", "2023-11-14"),
    ("date_of(-1)", "1969-12-31"),
    ("date_of(huge)", None),
    ("date_of(country)", None),
    ("n + d", 6.5),
    ("n - 10", -5.0),
    ("n * d", 7.5),
    ("n / 2", 2.5),
    ("n / 0", None),  # division by zero
    ("huge * huge", None),  # overflow
    ("big + 1", 1.2345678901234568e29),  # as doubles
    ("n + country", None),
    ("n + none", None),
    ("n + missing", MISSING),
    ("timestamp - to_timestamp(iso, 'iso8601')", -95687200123.0),
    ("(n + 1) * 2", 12.0),
    ("n + 1 * 2", 7.0),
    ("'v1'", "v1"),
    ("-3", -3),
]


@pytest.fixture(scope="module")
def projected_by_spark(spark: SparkSession) -> dict[str, str]:
    """Spark's record of the event for each case's projection, every case in one job."""
    projections = {text: parse_projection([f"{text} as v"]) for text, _ in CASES}
    columns = [compile_projection(p, F.col("value"), scope()) for p in projections.values()]
    values = at_once(spark, [(EVENT, META)], list(projections.values()), columns)
    return {text: record for text, [record] in zip(projections, values, strict=True)}


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_both_backends_compute_the_same(
    projected_by_spark: dict[str, str], text: str, expected: object
) -> None:
    python = project(parse_projection([f"{text} as v"]), EVENT, META, KEY)
    spark_record = json.loads(projected_by_spark[text])
    want = {} if expected is MISSING else {"v": expected}
    assert python == want
    assert spark_record == want
    assert _types(spark_record) == _types(want)  # 1 is not 1.0: ints and floats apart


def _types(record: dict) -> dict:
    return {k: type(v).__name__ for k, v in record.items()}


FILTERS = [
    ("lower(country) = 'us'", True),
    ("length(name) > 10 and trim(name) like 'Ana%'", True),
    ("(n + 1) * 2 = 12", True),
    ("n / 0 is null", True),
    ("coalesce(missing, n) in (5)", True),
    ("to_bool(t_s)", True),
    ("hash(country) = hash('US')", True),
    ("missing + 1 is null and not (missing + 1) is not null", True),
    ("upper(n) = 'X'", False),  # null: unknown
    ("date_of(timestamp) >= '2023-11-14'", True),
]


@pytest.fixture(scope="module")
def kept_by_spark(spark: SparkSession) -> dict[str, object]:
    return kept_at_once(spark, EVENT, META, [text for text, _ in FILTERS])


@pytest.mark.parametrize(("text", "keeps"), FILTERS)
def test_functions_in_filters_mean_the_same(
    kept_by_spark: dict[str, object], text: str, keeps: bool
) -> None:
    assert matches(parse_filter(text), EVENT, META, KEY) is keeps
    assert kept_by_spark[text] is keeps


def test_the_key_changes_every_hash_and_never_shows_in_the_plan(spark: SparkSession) -> None:
    projection = parse_projection(["hash(country) as h"])
    rows = frame(spark, [(EVENT, META)], projection)
    other = b"another stream's key"
    column = compile_projection(projection, F.col("value"), scope(other))
    [row] = rows.select(column.alias("out")).collect()
    assert json.loads(row["out"]) == {"h": hmac.new(other, b"US", hashlib.sha256).hexdigest()}
    assert json.loads(row["out"]) != project(projection, EVENT, META, KEY)
    plans = rows.select(column.alias("out"))._jdf.queryExecution().toString()
    assert "hash(" in plans
    for key in (other, other.hex().encode()):
        assert key.decode() not in plans


def test_a_hash_without_the_streams_key_is_refused_not_guessed(spark: SparkSession) -> None:
    projection = parse_projection(["hash(country) as h"])
    with pytest.raises(ValueError, match="the stream's key"):
        project(projection, EVENT, META)
    with pytest.raises(ValueError, match="the stream's key"):
        compile_projection(projection, F.col("value"), Scope(F.col("payload"), {}, None))


# A double's text: router/java/LangFunction.java's repr against Python's, over every kind of
# double (subnormals, powers of two, the edges of the fixed and exponent forms).
DOUBLES = (
    st.floats(allow_nan=False, allow_infinity=False, width=64)
    | st.integers(0, 2**64 - 1).map(lambda bits: struct.unpack("<d", struct.pack("<Q", bits))[0])
    | st.sampled_from([1e16, 1e15, 9999999999999998.0, 1e-4, 1e-5, 0.1, 5e-324, 2.0**-1074])
    | st.integers(-1100, 1100).map(lambda e: 2.0**e if -1074 <= e <= 1023 else 0.0)
)


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(numbers=st.lists(DOUBLES, min_size=1, max_size=50))
def test_a_doubles_text_is_pythons_repr(spark: SparkSession, numbers) -> None:
    # The Java function itself, called through the gateway: a Spark job per example cost a
    # tenth of a second each (30 s in all). The column that calls it is the next test's.
    lang = spark.sparkContext._jvm.LangFunction
    finite = [n for n in numbers if math.isfinite(n)]
    assert [lang.repr(n) for n in finite] == [repr(n) for n in finite]


def test_a_computed_doubles_text_is_pythons_repr(spark: SparkSession) -> None:
    numbers = [
        *(1e16, 1e15, 9999999999999998.0, 1e-4, 1e-5, 0.1, 5e-324, 2.0**-1074, 2.0**1023),
        *(-0.0, 0.0, -1.5, 1.7976931348623157e308, 123456789.125, 1e22, 1e21, 1e-7),
    ]
    frame_ = spark.createDataFrame([(n,) for n in numbers], "d double")
    jvm = spark.sparkContext._jvm
    texts = frame_.select(
        F.Column(jvm.LangFunction.column("repr", F.col("d")._jc, bytearray(), 0)).alias("t")
    ).collect()
    assert [r["t"] for r in texts] == [repr(n) for n in numbers]


def test_a_numbers_text_is_its_digits_or_its_doubles_shortest_form(spark: SparkSession) -> None:
    # As the producer wrote them: an integer's digits are kept (`-0` is 0, as Python reads
    # it), any other number is read as a double and written in its shortest form.
    text = '{"z": -0, "i": 120, "d": 1.50, "e": 1E2, "big": 12345678901234567890123}'
    projection = parse_projection(
        [f"to_string({name}) as {name}" for name in ("z", "i", "d", "e", "big")]
        + ["to_string(z * -1) as z2", "to_string(to_number('-0') * -1) as z3"]
    )
    expected = {
        "z": "0",
        "i": "120",
        "d": "1.5",
        "e": "100.0",
        "big": "12345678901234567890123",
        "z2": "-0.0",  # 0 (an integer, as Python reads -0) times -1: negative zero
        "z3": "-0.0",
    }
    assert project(projection, json.loads(text), {}) == expected
    events = envelope(
        spark.createDataFrame([(b"k", text.encode(), [], "t", 0, 0)], KAFKA),
        paths=paths_read(projection),
    )
    record = compile_projection(projection, F.col("value").cast("string"), scope())
    [row] = events.select(record.alias("out")).collect()
    assert json.loads(row["out"]) == expected


def test_star_except_keeps_every_other_member_as_written(spark: SparkSession) -> None:
    # Escapes, number texts and spacing inside the values kept byte for byte; a repeated name
    # handled at each of its places; a path through a non-object left alone; a chosen name
    # replacing the payload's own.
    text = (
        '{"user": {"email": "a@b", "id": 1.50, "tags": [1, 2]}, "s": "caf\\u00e9 \\"q\\"",'
        ' "user": {"email": "c@d", "phone": "5"}, "n": 1E2, "s2": "x", "id": {"x": 1}}'
    )
    items = ["* except user.email, user.phone, s2.x, nothing.here", "hash(id.x) as id"]
    projection = parse_projection(items)
    events = envelope(
        spark.createDataFrame([(b"k", text.encode(), [], "t", 0, 0)], KAFKA),
        paths=paths_read(projection),
    )
    record = compile_projection(projection, F.col("value").cast("string"), scope())
    [row] = events.select(record.alias("out")).collect()
    assert row["out"] == (
        '{"user": {"id": 1.50,"tags": [1, 2]},"s": "caf\\u00e9 \\"q\\"","user": {},'
        '"n": 1E2,"s2": "x","id":"' + hashed("1") + '"}'
    )
    expected = {"user": {}, "s": 'café "q"', "n": 100.0, "s2": "x", "id": hashed("1")}
    assert json.loads(row["out"]) == project(projection, json.loads(text), {}, KEY) == expected


def test_nested_calls_compile_to_an_expression_of_their_own_size(spark: SparkSession) -> None:
    # Every level reads its argument several times: bound once, the expression grows with the
    # depth, not as a power of it (40 levels of coalesce, unbound, are 2^40 nodes).
    def nested(depth: int) -> str:
        return "coalesce(" * depth + "a" + ", b)" * depth + " as c"

    sizes = []
    for depth in (10, 20, 40):
        # and coalesce inside a function that reads its argument once (lower, +): bound too
        lowered = parse_projection(["lower(" * depth + "coalesce(a, 'x')" + ")" * depth + " as d"])
        assert len(str(compile_projection(lowered, F.col("value"), scope()))) < 200 * depth
        projection = parse_projection([nested(depth)])
        column = compile_projection(projection, F.col("value"), scope())
        sizes.append(len(str(column)))
        [row] = frame(spark, [({"b": 2}, META)], projection).select(column.alias("out")).collect()
        assert json.loads(row["out"]) == project(projection, {"b": 2}, META, KEY) == {"c": 2}
    assert sizes[2] < 2.5 * sizes[1] < 6.25 * sizes[0], sizes
