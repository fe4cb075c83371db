"""What the language's functions mean (this module is the reference the Spark backend,
`spark.py`, is held to, case by case and on generated events and expressions).

Every function but `coalesce`, which is for nulls and missing fields, follows these rules:

- A missing argument makes the result missing: a projected field is then left out, as a field
  the event does not have is.
- A null argument, or one of a type the function does not take, makes the result null. A
  function never fails an event.
- Numbers are doubles, as comparisons read them. A result that is not finite (an overflow, a
  division by zero) is null.

A value's text, what `to_string`, `concat`, `hash` and `mask` read: a string's own, `true` or
`false`, or a number's. That is the digits of an integer as the event wrote them (`-0` is `0`),
else the shortest decimal that reads back as the same double, in Python's form (`1.5`, `1e+16`,
`1e-05`). So `5` and `'5'` hash alike. Objects and arrays have no text.

A number the language computes is written that way in a record too, so an integral result keeps
its `.0` (`3.0`): a sink that types a field by its first value (Elasticsearch) then types it as
a floating point number, and a later `3.5` fits.

`to_timestamp(value, 'iso8601')` reads `yyyy-mm-ddThh:mm:ss`, an optional fraction (read to the
millisecond) and a zone, `Z` or `+hh:mm`/`-hh:mm`. A time without a zone is no moment: null.
Times give epoch milliseconds, as the event's `timestamp`, within the years 1 to 9999.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import hmac
import math
import re
from collections.abc import Callable
from typing import Any

from keystone.router.lang.ast import MISSING, REDACTED, as_double, json_type

# What `trim` removes: JSON's whitespace.
WHITESPACE = " \t\n\r"
# A JSON number's text, and an integer's (what Python's json reads as an int).
NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")
MAX_NUMBER_CHARS = 4000  # a longer string is no number to `to_number` (Python's int stops at 4300)
# ISO-8601 as `to_timestamp` reads it: a date, a time to the second (a fraction of up to 9
# digits, read to the millisecond) and a zone, Z or an offset. ASCII digits only.
ISO8601 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?"
    r"(?:(Z)|([+-])([0-9]{2}):([0-9]{2}))"
)
# The days `date_of` and `to_timestamp` give a date to: years 1 to 9999.
FIRST_DAY, LAST_DAY = -719_162, 2_932_896  # 0001-01-01 and 9999-12-31, days from 1970-01-01
DAY_MS = 86_400_000
EPOCH = datetime.date(1970, 1, 1)


def number_text(value: int | float) -> str | None:
    """A number's text: an integer's digits, else the double's shortest form (`repr`); None
    when it is not finite."""
    if isinstance(value, int):
        return str(value)
    return repr(value) if math.isfinite(value) else None


def text_of(value: Any) -> str | None:
    """A string's, number's or boolean's text; None for anything else."""
    kind = json_type(value)
    if kind == "string":
        return value
    if kind == "boolean":
        return "true" if value else "false"
    if kind == "number":
        return number_text(value)
    return None


def finite(number: float) -> float | None:
    return number if math.isfinite(number) else None


def keyed_hash(text: str, key: bytes) -> str:
    # A lone surrogate (which the router's reader refuses: such an event is a dead letter)
    # is hashed as Python encodes it, so that a preview never fails on it.
    return hmac.new(key, text.encode(errors="surrogatepass"), hashlib.sha256).hexdigest()


def mask(text: str, keep: int) -> str:
    """All but the last `keep` characters as '*'; all of them when there are no more."""
    hidden = len(text) - keep if len(text) > keep else len(text)
    return "*" * hidden + text[hidden:]


def to_number(value: Any) -> int | float | None:
    kind = json_type(value)
    if kind == "number":
        return value
    if kind != "string":
        return None
    text = value.strip(WHITESPACE)
    if len(text) > MAX_NUMBER_CHARS or not NUMBER.fullmatch(text):
        return None
    return int(text) if INTEGER.fullmatch(text) else finite(float(text))


def to_bool(value: Any) -> bool | None:
    kind = json_type(value)
    if kind == "boolean":
        return value
    if kind == "number":
        return {0: False, 1: True}.get(as_double(value))  # type: ignore[call-overload]
    if kind == "string":
        return {"true": True, "1": True, "false": False, "0": False}.get(value.lower())
    return None


def in_days(ms: float) -> int | None:
    """The day (from 1970-01-01) of epoch milliseconds, if within years 1 to 9999."""
    day = math.floor(ms / DAY_MS)
    return day if FIRST_DAY <= day <= LAST_DAY else None


def to_timestamp(value: Any, form: str) -> int | None:
    """Epoch milliseconds of a time written as `form`: an ISO-8601 string, or a number of
    milliseconds or seconds (the milliseconds' floor); null outside years 1 to 9999."""
    kind = json_type(value)
    if form == "iso8601":
        if kind != "string":
            return None
        return iso8601(value)
    if kind != "number":
        return None
    ms = as_double(value) * (1000 if form == "epoch_s" else 1)
    if not math.isfinite(ms) or in_days(ms) is None:
        return None
    return math.floor(ms)


def iso8601(text: str) -> int | None:
    found = ISO8601.fullmatch(text)
    if found is None:
        return None
    year, month, day, hour, minute, second = (int(found[i]) for i in range(1, 7))
    millis = int((found[7] or "").ljust(3, "0")[:3])
    offset = 0
    if not found[8]:
        hours, minutes = int(found[10]), int(found[11])
        if hours > 23 or minutes > 59:
            return None
        offset = (hours * 60 + minutes) * (1 if found[9] == "+" else -1)
    try:
        moment = datetime.datetime(year, month, day, hour, minute, second)
    except ValueError:  # no such day or time (a 30th of February, second 60, year 0)
        return None
    days = (moment.date() - EPOCH).days
    seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset * 60
    return seconds * 1000 + millis


def date_of(value: Any) -> str | None:
    if json_type(value) != "number":
        return None
    ms = as_double(value)
    day = in_days(ms) if math.isfinite(ms) else None
    return None if day is None else (EPOCH + datetime.timedelta(days=day)).isoformat()


def substring(value: Any, start: Any, length: Any) -> str | None:
    """`length` characters of a string from `start` (1 is the first); both whole numbers,
    `start` 1 or more, `length` 0 or more, else null."""
    if json_type(value) != "string" or {json_type(start), json_type(length)} != {"number"}:
        return None
    first, count = as_double(start), as_double(length)
    if not (math.isfinite(first) and math.isfinite(count)):
        return None
    if first != math.floor(first) or count != math.floor(count) or first < 1 or count < 0:
        return None
    begin = int(first) - 1
    return value[begin : begin + int(count)]


def arithmetic(op: str, left: Any, right: Any) -> float | None:
    if json_type(left) != "number" or json_type(right) != "number":
        return None
    a, b = as_double(left), as_double(right)
    if op == "/":
        return None if b == 0 else finite(a / b)
    return finite({"+": a + b, "-": a - b, "*": a * b}[op])


def _strings(function: Callable[[str], Any]) -> Callable[[Any], Any]:
    return lambda value: function(value) if json_type(value) == "string" else None


def _texts(function: Callable[[str], Any]) -> Callable[[Any], Any]:
    def apply(value: Any) -> Any:
        text = text_of(value)
        return None if text is None else function(text)

    return apply


@functools.cache
def case_table(mapping: str) -> dict[str, str]:
    """Each character that `str.lower` (or `str.upper`) changes, and what to: the table both
    backends map by, one character at a time (the Spark backend hands it to its Java
    expression), so that they agree whatever Unicode version each would follow. A capital
    sigma is a small sigma wherever it stands: no rule looks at its neighbours. Surrogates have
    no case (and no Spark string holds one alone)."""
    convert = getattr(str, mapping)
    table = {}
    for code in range(0x110000):
        if 0xD800 <= code <= 0xDFFF:
            continue
        char = chr(code)
        if (mapped := convert(char)) != char:
            table[char] = mapped
    return table


def map_case(text: str, mapping: str) -> str:
    table = case_table(mapping)
    return "".join(table.get(char, char) for char in text)


# One argument each (besides options), after the missing/null rule.
UNARY: dict[str, Callable[[Any], Any]] = {
    "lower": _strings(lambda s: map_case(s, "lower")),
    "upper": _strings(lambda s: map_case(s, "upper")),
    "trim": _strings(lambda s: s.strip(WHITESPACE)),
    "length": _strings(len),
    "to_string": text_of,
    "to_number": to_number,
    "to_bool": to_bool,
    "date_of": date_of,
}


def call(name: str, args: list[Any], key: bytes | None) -> Any:
    """`name` applied to evaluated `args` (MISSING among them where a field is missing)."""
    if name == "coalesce":
        present = [a for a in args if a is not MISSING]
        return next((a for a in present if a is not None), None if present else MISSING)
    if any(a is MISSING for a in args):
        return MISSING
    if name == "redact":
        return REDACTED
    if any(a is None for a in args):
        return None
    if name in UNARY:
        return UNARY[name](args[0])
    if name == "hash":
        if key is None:
            raise ValueError("hash needs the stream's key")
        return _texts(lambda text: keyed_hash(text, key))(args[0])
    if name == "mask":
        return _texts(lambda text: mask(text, args[1]))(args[0])
    if name == "to_timestamp":
        return to_timestamp(args[0], args[1])
    if name == "concat":
        texts = [text_of(a) for a in args]
        return None if None in texts else "".join(texts)  # type: ignore[arg-type]
    if name == "substring":
        return substring(*args)
    return arithmetic(name, *args)
