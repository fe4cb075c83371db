"""How the router reads an event's text: it reads only the values at the paths its output uses,
yet says "not JSON" and "not a JSON object" exactly when Python's strict json module would (NaN
refused), which is the proxy's check but for a number too large for a double and an escaped
lone surrogate in a string the reader does not decode: the proxy refuses both, the router reads
them. A lone surrogate in a string read at a path has no Spark string to hold it as Python does:
the event is then "not JSON" to that reader, and the stream's dead-letter query reads every path
of every output, so such an event is a dead letter, never silently skipped. The values are the
agreement tests' business (tests/router/lang), but for repeated keys, which Python's dicts cannot
make. One more difference, kept from Spark's parsers: text after a complete value is ignored.
The proxy never writes such records; only a producer writing to Kafka directly could."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from keystone.contracts.spec import load_spec
from keystone.router.job import dead_letter_paths, paths_read_by
from keystone.router.lang.evaluate import project, read_event
from keystone.router.lang.parser import parse_projection
from keystone.router.source import envelope
from tests.router.lang.test_agreement import EVENTS, NAMES
from tests.support.frames import KAFKA

HEADERS = [("ks_guid", b"g-1"), ("ks_ts", b"1700000000000")]
# Texts near JSON: valid events, then edited one character at a time, padded, or not objects.
EDITS = st.lists(
    st.tuples(st.integers(0, 200), st.sampled_from(['"', "{", "}", "[", "]", ",", ":", "'", ""])),
    min_size=1,
    max_size=2,
)
NEAR_JSON = st.one_of(
    EVENTS.map(json.dumps),
    st.builds(lambda event, edits: _edit(json.dumps(event), edits), EVENTS, EDITS),
    st.sampled_from(["", " ", "[1]", "5", '"s"', "null", "nope", " \n{}", '{"a": NaN}']),
    st.sampled_from(['{"a": 01}', "{'a': 1}", '{"a": 1,}', '{"a": 1e999}', '{"z": "\\ud800"}']),
)


def _edit(text: str, edits: list[tuple[int, str]]) -> str:
    for at, put in edits:
        at %= len(text)
        text = text[:at] + put + text[at + 1 :]  # replaces one character ("" deletes it)
    return text


# Read whole, and through objects that events often hold something else in.
PATHS = [(NAMES[0],), (NAMES[1], NAMES[2]), (NAMES[2], NAMES[0], NAMES[1])]


def expected_problem(text: str | bytes) -> str | None:
    try:
        value = read_event(text if isinstance(text, bytes) else text.encode())
    except ValueError:
        return "not JSON"
    return None if isinstance(value, dict) else "not a JSON object"


# Each example is five lists of texts read in one Spark job: 40 lists in all, as when each list
# was an example of its own (a job each, most of this module's time).
@settings(max_examples=8, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(lists=st.lists(st.lists(NEAR_JSON, min_size=1, max_size=30), min_size=5, max_size=5))
def test_not_json_exactly_when_the_proxy_would_refuse_it(
    spark: SparkSession, lists: list[list[str]]
) -> None:
    texts = [text for texts in lists for text in texts]
    rows = [(b"k", t.encode(), HEADERS, "t", 0, i) for i, t in enumerate(texts)]
    read = envelope(spark.createDataFrame(rows, KAFKA), paths=PATHS).orderBy("offset")
    for text, row in zip(texts, read.collect(), strict=True):
        assert row["problem"] == expected_problem(text), text


@pytest.mark.parametrize(
    "value",
    [
        b'\xef\xbb\xbf{"a": 1}',  # a byte order mark
        '{"a": 1}'.encode("utf-16-le"),
        '{"a": 1}'.encode("utf-16"),
        b'{"a": "\xed\xa0\x80"}',  # a surrogate, encoded
        b'{"a": "\xc0\xaf"}',  # an overlong form
        b'{"a": "\xf4\x90\x80\x80"}',  # past U+10FFFF
        b'{"x": "\xed\xa0\x80"}',  # ...where no path reads
        b'{"a": "caf\xc3\xa9 \xf0\x9f\x98\x80"}',  # UTF-8 beyond ASCII
        b'{"a": 0.' + b"1" * 1500 + b"}",  # longer than Jackson's default limit
        b'{"' + b"k" * 60_000 + b'": 1}',  # so is this name
    ],
)
def test_bytes_are_json_exactly_when_python_decodes_and_reads_them(
    spark: SparkSession, value: bytes
) -> None:
    rows = [(b"k", value, HEADERS, "t", 0, 0)]
    [row] = envelope(spark.createDataFrame(rows, KAFKA), paths=PATHS).collect()
    assert row["problem"] == expected_problem(value)


def test_a_lone_surrogate_in_a_string_read_makes_the_event_unreadable_to_its_readers(
    spark: SparkSession,
) -> None:
    text = '{"a": 1, "z": "\\ud800", "o": {"a": 1, "z": "\\ud800"}}'
    frame = spark.createDataFrame([(b"k", text.encode(), HEADERS, "t", 0, 0)], KAFKA)
    assert envelope(frame, paths=[("a",), ("o", "a")]).first()["problem"] is None
    assert envelope(frame, paths=[("a",), ("z",)]).first()["problem"] == "not JSON"
    assert envelope(frame, paths=[("o", "z")]).first()["problem"] == "not JSON"
    # Read whole, an object keeps its text as it is, escapes and all: JSON Python reads alike.
    [row] = envelope(frame, paths=[("o",)]).select("problem", "payload.o.json").collect()
    assert row["problem"] is None and json.loads(row["json"]) == json.loads(text)["o"]
    # Paths through values that are not objects read nothing there, and decode nothing.
    assert envelope(frame, paths=[("a", "b"), ("o", "a", "b")]).first()["problem"] is None
    # A repeated key's last value is the one read.
    again = '{"a": {"b": "\\ud800"}, "a": {"b": "x"}}'
    frame = spark.createDataFrame([(b"k", again.encode(), HEADERS, "t", 0, 0)], KAFKA)
    assert envelope(frame, paths=[("a", "b")]).first()["problem"] is None


def test_what_one_output_cannot_read_the_dead_letter_query_finds(spark: SparkSession) -> None:
    stream = load_spec(
        {
            "name": "plays",
            "owner": "team",
            "outputs": [
                {"name": "deep", "projection": ["t.z"], "sink": {"type": "kafka"}},
                {"name": "whole", "projection": ["t"], "sink": {"type": "kafka"}},
            ],
        }
    )
    deep, whole = stream.outputs
    text = '{"t": {"a": "x", "z": "\\ud800"}}'
    frame = spark.createDataFrame([(b"k", text.encode(), HEADERS, "t", 0, 0)], KAFKA)

    def problem(paths: frozenset[tuple[str, ...]]) -> str | None:
        return envelope(frame, paths=paths).first()["problem"]

    assert problem(paths_read_by([whole])) is None  # `t` is read as its text
    assert problem(paths_read_by([deep])) == "not JSON"
    assert problem(dead_letter_paths(stream.outputs)) == "not JSON"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": {"b": 1}, "a": "x"}', None),
        ('{"a": "x", "a": {"b": 1}}', 1),
        ('{"a": {"b": 1}, "a": {"c": 2}}', None),
        ('{"a": {"b": 1, "b": 2}}', 2),
    ],
)
def test_a_repeated_key_keeps_its_last_value_along_a_path(
    spark: SparkSession, text: str, value: int | None
) -> None:
    # What the Python evaluator reads: json keeps a repeated key's last value.
    assert project(parse_projection(["a.b"]), json.loads(text), {}).get("b") == value
    frame = spark.createDataFrame([(b"k", text.encode(), HEADERS, "t", 0, 0)], KAFKA)
    [row] = envelope(frame, paths=[("a", "b")]).select("problem", "payload.`a.b`.json").collect()
    assert row["problem"] is None
    assert (None if row["json"] is None else json.loads(row["json"])) == value
