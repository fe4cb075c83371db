import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keystone.contracts.envelope import STRICT_JSON
from keystone.contracts.errors import BadRequest, PayloadTooLarge, UnsupportedMediaType
from keystone.ingest_proxy.events import JSON, NDJSON, field, media_type, parse_events

LIMIT = 1024 * 1024


def test_array_elements_keep_their_exact_bytes() -> None:
    body = '[ {"b":1.50, "a" : "é\\u00e9"} ,\n\t{"n": 1e3,"x":[1, {"y":null}]}]'.encode()
    events = parse_events(body, JSON, LIMIT)
    assert [e.raw for e in events] == [
        '{"b":1.50, "a" : "é\\u00e9"}'.encode(),
        b'{"n": 1e3,"x":[1, {"y":null}]}',
    ]
    assert events[0].value == {"b": 1.5, "a": "éé"}


def test_a_single_object_is_one_event_without_surrounding_space() -> None:
    [event] = parse_events(b'  {"a": 1}\n', JSON, LIMIT)
    assert event.raw == b'{"a": 1}'


def test_ndjson_lines_are_events_and_blank_lines_are_skipped() -> None:
    events = parse_events(b'{"a":1}\r\n\n{"b": 2}\n', NDJSON, LIMIT)
    assert [e.raw for e in events] == [b'{"a":1}', b'{"b": 2}']


def deep(depth: int) -> bytes:
    """An object `depth` deep: arrays in it."""
    return b'{"a":' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"


def test_nesting_is_counted_outside_strings_and_allowed_to_the_limit() -> None:
    events = parse_events(deep(512) + b'\n{"s":"' + b"[" * 600 + b'\\"{"}', NDJSON, 10**6)
    assert len(events) == 2
    assert len(parse_events(b"[" + deep(512) + b"]", JSON, 10**6)) == 1


@pytest.mark.parametrize(
    ("body", "kind", "message", "details"),
    [
        (b'{"a":', JSON, "the body is not JSON", {}),
        (b"[1]", JSON, "event 0 is not a JSON object", {"index": 0}),
        (b'[{"a":1}, {"b":}]', JSON, "event 1 is not JSON", {"index": 1}),
        (b'[{"a":1} {"b":2}]', JSON, "expected ',' or ']' after event 0", {}),
        (b'[{"a":1}] x', JSON, "more after its JSON array", {}),
        (b'{"a":1} {"b":2}', JSON, "more after its JSON value", {}),
        (b'{"a": NaN}', JSON, "NaN is not JSON", {}),
        (b"[]", JSON, "no events", {}),
        (b"", NDJSON, "no events", {}),
        (b'{"a":1}\n{"b":\n', NDJSON, "line 2 is not JSON", {"line": 2}),
        (b'{"a":1}\n[1]\n', NDJSON, "line 2 is not a JSON object", {"line": 2}),
        (b'{"a":1}\n\x0b\n', NDJSON, "line 2 is not JSON", {"line": 2}),  # not JSON's space
        (b'{"a":1}\n\xef\xbb\xbf{"b":2}\n', NDJSON, "line 2 is not JSON", {"line": 2}),  # a BOM
        (b'{"a":"\xff"}', JSON, "not UTF-8", {}),
        (deep(513), JSON, "event 0 is nested more than 512 deep", {"index": 0}),
        (b"[{}," + deep(600) + b"]", JSON, "event 1 is nested more than 512", {"index": 1}),
        (deep(3000), JSON, "the body is nested more than 512 deep", {}),
        (b"[" + deep(3000) + b"]", JSON, "event 0 is nested more than 512", {"index": 0}),
        (b"{}\n" + deep(600), NDJSON, "event 1 is nested more than 512 deep", {"index": 1}),
        (b"{}\n" + deep(3000), NDJSON, "line 2 is nested more than 512 deep", {"line": 2}),
    ],
)
def test_broken_bodies_name_the_event(body: bytes, kind: str, message: str, details: dict) -> None:
    with pytest.raises(BadRequest, match=message) as caught:
        parse_events(body, kind, LIMIT)
    assert caught.value.status == 400
    assert caught.value.details == details


def test_an_event_over_the_limit_is_refused_by_index() -> None:
    with pytest.raises(PayloadTooLarge, match="event 1 is 21 bytes; the limit is 20") as caught:
        parse_events(b'[{"a":1},{"b":"1234567890123"}]', JSON, 20)
    assert caught.value.status == 413 and caught.value.details["index"] == 1


def test_media_types() -> None:
    assert media_type("application/json; charset=utf-8") == JSON
    assert media_type("Application/X-NDJSON") == NDJSON
    for wrong in (None, "text/plain", "application/xml"):
        with pytest.raises(UnsupportedMediaType):
            media_type(wrong)


def test_field_paths() -> None:
    value = {"user": {"id": 7}, "top": "x"}
    assert field(value, "user.id") == 7
    assert field(value, "top") == "x"
    assert field(value, "user.missing") is None
    assert field(value, "top.deeper") is None


def test_values_are_exact_even_beyond_64_bit_integers() -> None:
    [event] = parse_events(b'{"big": 123456789012345678901234567890}\n', NDJSON, LIMIT)
    assert event.value == {"big": 123456789012345678901234567890}
    with pytest.raises(BadRequest, match="NaN is not JSON"):
        parse_events(b'{"a": NaN}\n', NDJSON, LIMIT)


def test_ndjson_lines_beyond_the_fast_checks_range_are_judged_by_the_standard() -> None:
    body = b'{"big": 18446744073709551616}\n{"inf": 1e999}\n{"lone": "\\ud800"}'
    events = parse_events(body, NDJSON, LIMIT)
    assert [e.value for e in events] == [{"big": 2**64}, {"inf": float("inf")}, {"lone": "\ud800"}]


def standard_object(line: bytes) -> bool:
    try:
        return isinstance(STRICT_JSON.decode(line.decode("utf-8")), dict)
    except ValueError:
        return False


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
JSONISH = '{}[]":,.-+eE0123456789truefalsn\\u \t\r\x0b\x00é\ufeff\ud7ff'


@st.composite
def near_json_lines(draw: st.DrawFn) -> bytes:
    """A JSON text, or one with a few of JSON's own characters put in or taken out."""
    text = json.dumps(draw(json_values), ensure_ascii=draw(st.booleans()))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(text)))
        if draw(st.booleans()):
            text = text[:at] + draw(st.sampled_from(JSONISH)) + text[at:]
        else:
            text = text[:at] + text[at + 1 :]
    return text.encode("utf-8", "surrogatepass")


@settings(max_examples=400, deadline=None)
@given(near_json_lines())
def test_an_ndjson_line_is_accepted_exactly_when_the_standard_reads_an_object(line: bytes) -> None:
    line = line.replace(b"\n", b"")
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return  # refused before any line is looked at (tested above)
    blank = not line.rstrip(b"\r").strip(b" \t\r")
    try:
        accepted = len(parse_events(line, NDJSON, LIMIT)) == 1
    except BadRequest:
        accepted = False
    assert accepted == (not blank and standard_object(line.rstrip(b"\r"))), line
