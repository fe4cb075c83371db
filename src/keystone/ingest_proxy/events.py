"""A request body split into events: one JSON object, a JSON array of objects, or NDJSON.

Each event keeps the producer's exact bytes (what goes to Kafka) beside its parsed object (for
the schema and the partition key). Any broken event refuses the whole request, naming it.
"""

from __future__ import annotations

import re
from itertools import accumulate
from typing import Any

import simdjson

from keystone.contracts.envelope import JSON_SPACE, STRICT_JSON
from keystone.contracts.errors import BadRequest, PayloadTooLarge, UnsupportedMediaType
from keystone.contracts.limits import Limits

JSON = "application/json"
NDJSON = "application/x-ndjson"
# Deeper events are refused: Python's decoder (about 1,000 levels, less the caller's stack),
# simdjson's (1,024) and the router's Jackson (1,000) each stop somewhere; this is below all.
MAX_DEPTH = 512
DEFAULT_MAX_EVENTS = Limits.model_fields["max_events_per_request"].default
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_OPEN_CLOSE = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")
_OTHER = bytes(set(range(256)) - set(b"[{]}"))
_SPACE = JSON_SPACE.encode()
_BOM = b"\xef\xbb\xbf"
_PARSER = simdjson.Parser()  # holds one document at a time: none is kept past its check


class Event:
    """The producer's bytes for one event, unchanged, and its parsed value on demand."""

    __slots__ = ("_value", "raw")

    def __init__(self, raw: bytes, value: dict[str, Any] | None = None) -> None:
        self.raw = raw
        self._value = value

    @property
    def value(self) -> dict[str, Any]:
        # Parsed exactly by the standard library, and only when a schema or key needs it.
        if self._value is None:
            self._value = STRICT_JSON.decode(self.raw.decode("utf-8"))
        return self._value


def _is_object(raw: bytes) -> bool:
    """Whether `raw` (valid UTF-8) is one JSON object; ValueError saying why when it is not JSON.

    simdjson checks it without building a Python value (0.3 µs for a 1 KB event, where
    orjson.loads took 1.4 µs). It refuses what the standard library accepts beyond its range
    (integers over 64 bits, 1e999, lone surrogates) and accepts one thing the standard library
    refuses, a leading byte order mark: those and whatever it refuses, the standard library
    judges, so exactly standard JSON passes either way."""
    if not raw.startswith(_BOM):
        try:
            return isinstance(_PARSER.parse(raw), simdjson.Object)
        except (ValueError, RuntimeError):  # RuntimeError: nested deeper than it goes
            pass
    return isinstance(STRICT_JSON.decode(raw.decode("utf-8")), dict)


def media_type(content_type: str | None) -> str:
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind not in (JSON, NDJSON):
        raise UnsupportedMediaType(
            f"Content-Type must be {JSON} (an object or an array of objects) or {NDJSON}, "
            f"not {content_type or 'missing'}"
        )
    return kind


def parse_events(
    body: bytes, kind: str, max_event_bytes: int, max_events: int = DEFAULT_MAX_EVENTS
) -> list[Event]:
    """The request's events; refused (with nothing parsed past the limit) when it holds more
    than `max_events`: each becomes a Kafka record and a guid in the answer."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadRequest(f"the body is not UTF-8 (byte {e.start})") from e
    events = _ndjson(body, max_events) if kind == NDJSON else _json(text, max_events)
    if not events:
        raise BadRequest("the body holds no events")
    for index, event in enumerate(events):
        if len(event.raw) > max_event_bytes:
            raise PayloadTooLarge(
                f"event {index} is {len(event.raw)} bytes; the limit is {max_event_bytes}",
                index=index,
                setting="max_event_bytes",
                limit=max_event_bytes,
            )
        if _depth(event.raw) > MAX_DEPTH:
            raise BadRequest(f"event {index} is nested more than {MAX_DEPTH} deep", index=index)
    return events


def _depth(raw: bytes) -> int:
    """How deep the JSON text nests, or 0 for a text too short or with too few brackets to be
    too deep (each level takes two bytes; the exact walk is for the rare text that could be)."""
    if len(raw) <= 2 * MAX_DEPTH or raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return 0
    brackets = _STRING.sub(b"", raw).translate(_OPEN_CLOSE, _OTHER)  # 2 opens, 0 closes
    return max((level - i for i, level in enumerate(accumulate(brackets), start=1)), default=0)


def _too_many(max_events: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"the request holds more than {max_events} events (max_events_per_request): send "
        "fewer per request",
        setting="max_events_per_request",
        limit=max_events,
    )


def _json(text: str, max_events: int) -> list[Event]:
    start = _skip_space(text, 0)
    if text.startswith("[", start):
        return _array(text, start, max_events)
    try:
        value, end = STRICT_JSON.raw_decode(text, start)
    except ValueError as e:
        raise BadRequest(f"the body is not JSON: {e}") from e
    except RecursionError as e:
        raise BadRequest(f"the body is nested more than {MAX_DEPTH} deep") from e
    if _skip_space(text, end) != len(text):
        raise BadRequest(f"the body has more after its JSON value (at character {end})")
    return [_event(value, text[start:end], "the body")]


def _array(text: str, start: int, max_events: int) -> list[Event]:
    """Elements of a top-level array with the exact text of each, in one pass."""
    events, pos = [], _skip_space(text, start + 1)
    if text.startswith("]", pos):
        pos = _skip_space(text, pos + 1)
    else:
        while True:
            index = len(events)
            if index == max_events:
                raise _too_many(max_events)
            try:
                value, end = STRICT_JSON.raw_decode(text, pos)
            except ValueError as e:
                raise BadRequest(f"event {index} is not JSON: {e}", index=index) from e
            except RecursionError as e:
                raise BadRequest(
                    f"event {index} is nested more than {MAX_DEPTH} deep", index=index
                ) from e
            events.append(_event(value, text[pos:end], f"event {index}", index=index))
            pos = _skip_space(text, end)
            if text.startswith(",", pos):
                pos = _skip_space(text, pos + 1)
            elif text.startswith("]", pos):
                pos = _skip_space(text, pos + 1)
                break
            else:
                raise BadRequest(f"expected ',' or ']' after event {index} (character {pos})")
    if pos != len(text):
        raise BadRequest(f"the body has more after its JSON array (at character {pos})")
    return events


def _ndjson(body: bytes, max_events: int) -> list[Event]:
    """Lines checked as bytes, which are what goes to Kafka: no decoding and encoding again."""
    events = []
    for number, line in enumerate(body.split(b"\n"), start=1):
        line = line.rstrip(b"\r")
        if not line.strip(_SPACE):
            continue
        try:
            is_object = _is_object(line)
        except ValueError as e:
            raise BadRequest(f"line {number} is not JSON: {e}", line=number) from e
        except RecursionError as e:
            raise BadRequest(
                f"line {number} is nested more than {MAX_DEPTH} deep", line=number
            ) from e
        if not is_object:
            raise BadRequest(f"line {number} is not a JSON object", line=number)
        if len(events) == max_events:
            raise _too_many(max_events)
        events.append(Event(line))
    return events


def _event(value: Any, text: str, where: str, **details: int) -> Event:
    if not isinstance(value, dict):
        raise BadRequest(f"{where} is not a JSON object", **details)
    return Event(raw=text.encode("utf-8"), value=value)


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in JSON_SPACE:
        pos += 1
    return pos


def field(value: dict[str, Any], path: str) -> Any:
    """The value at a dotted path, None when any step is missing."""
    for step in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(step)
    return value
