"""The language's syntax tree: immutable values, shared by the parser and both backends."""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Literal as Choice

# Metadata names and their JSON type; every other name is a payload path.
METADATA = {"guid": "string", "timestamp": "number", "host": "string", "app": "string"}


# The JSON types a comparison holds between (others make it unknown).
COMPARABLE = ("string", "number", "boolean")

# The comparison operators, for both backends: on plain values and on Spark Columns alike.
COMPARISONS = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


@dataclass(frozen=True)
class Field:
    path: tuple[str, ...]  # ("user", "id") for user.id


@dataclass(frozen=True)
class Meta:
    name: str  # one of METADATA


@dataclass(frozen=True)
class Const:
    value: str | int | float | bool | None


@dataclass(frozen=True)
class Call:
    """A function of values (`FUNCTIONS`), or arithmetic: `+ - * /` (`ARITHMETIC`) on two."""

    name: str
    args: tuple[Operand, ...]


Operand = Field | Meta | Const | Call


@dataclass(frozen=True)
class Signature:
    """A function's arguments as written (`form`: their names, `...` for more of the last),
    what it gives, and which arguments must be literals (an option, not a value: `mask`'s
    count, `to_timestamp`'s format)."""

    form: str
    summary: str
    literals: tuple[int, ...] = ()  # positions that take a literal

    @property
    def arity(self) -> tuple[int, int | None]:
        """At least, at most (None: any number) arguments."""
        names = self.form[self.form.index("(") + 1 : -1].split(", ")
        more = names[-1] == "..."
        return (len(names) - more, None if more else len(names))


# Names of the formats `to_timestamp` reads.
TIME_FORMATS = ("iso8601", "epoch_ms", "epoch_s")
# What `redact` puts in place of a value.
REDACTED = "[redacted]"

FUNCTIONS: dict[str, Signature] = {
    # Hygiene: what a sink must not hold raw.
    "hash": Signature(
        "hash(value)", "HMAC-SHA256 of the value's text under the stream's key, in hex"
    ),
    "mask": Signature(
        "mask(value, keep)",
        "the value's text with all but its last `keep` characters as `*` (all of them when "
        "it has no more)",
        literals=(1,),
    ),
    "redact": Signature("redact(value)", f"`'{REDACTED}'` in place of any value, null too"),
    # Normalising.
    "lower": Signature(
        "lower(string)", "the string in lower case, character by character (no final sigma)"
    ),
    "upper": Signature("upper(string)", "the string in upper case (`ß` is `SS`)"),
    "trim": Signature("trim(string)", "the string without JSON whitespace at either end"),
    "coalesce": Signature(
        "coalesce(value, value, ...)", "the first argument neither missing nor null, any type"
    ),
    "to_number": Signature(
        "to_number(value)", "a number as it is; a string holding a JSON number as that number"
    ),
    "to_string": Signature("to_string(value)", "a string, number or boolean as its text"),
    "to_bool": Signature(
        "to_bool(value)", "a boolean; `'true'`, `'false'`, `'1'`, `'0'` in any case; 1 or 0"
    ),
    "to_timestamp": Signature(
        "to_timestamp(value, format)",
        "epoch milliseconds of a time written as the format says: "
        + ", ".join(f"`'{f}'`" for f in TIME_FORMATS),
        literals=(1,),
    ),
    # Computed.
    "concat": Signature(
        "concat(value, value, ...)", "the texts of strings, numbers and booleans, joined"
    ),
    "length": Signature("length(string)", "the string's length in characters (code points)"),
    "substring": Signature(
        "substring(string, start, length)",
        "`length` characters of the string from `start` (1 is the first)",
    ),
    "date_of": Signature("date_of(millis)", "the UTC date (`yyyy-mm-dd`) of epoch milliseconds"),
}
ARITHMETIC = ("+", "-", "*", "/")


@dataclass(frozen=True)
class Compare:
    op: Choice["=", "!=", "<", "<=", ">", ">="]
    left: Operand
    right: Operand


@dataclass(frozen=True)
class IsNull:
    operand: Operand


@dataclass(frozen=True)
class In:
    """`operand in (v1, v2, ...)`: the OR of `operand = v` (one node, so that a long list is no
    deeper a tree than a short one)."""

    operand: Operand
    values: tuple[Const, ...]


@dataclass(frozen=True)
class Like:
    operand: Operand
    pattern: str  # as written: a backslash escapes %, _ or a backslash


@dataclass(frozen=True)
class Truth:
    """A bare operand used as a condition: true when it is the boolean true."""

    operand: Operand


@dataclass(frozen=True)
class Not:
    expr: Expr


@dataclass(frozen=True)
class And:
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Or:
    left: Expr
    right: Expr


Expr = Compare | In | IsNull | Like | Truth | Not | And | Or


@dataclass(frozen=True)
class Column:
    source: Field | Meta
    name: str  # the key in the output record


@dataclass(frozen=True)
class Projection:
    whole: bool  # "*": the payload, less `dropped`, plus `columns`
    columns: tuple[Column, ...] = ()
    dropped: tuple[tuple[str, ...], ...] = ()  # `* except a.b, c`: paths left out of it


def paths_read(*nodes: Expr | Projection | None) -> frozenset[tuple[str, ...]]:
    """The payload's field paths that these filters and projections read: all of an event the
    router needs parsed. `*` reads none by name (it passes the payload on as it is, its
    `except` paths left out as text)."""
    paths: set[tuple[str, ...]] = set()

    def visit(node: object) -> None:
        if isinstance(node, Field):
            paths.add(node.path)
        elif isinstance(node, Call):
            for arg in node.args:
                visit(arg)
        elif isinstance(node, Compare):
            visit(node.left)
            visit(node.right)
        elif isinstance(node, In | IsNull | Like | Truth):  # an In's values are constants
            visit(node.operand)
        elif isinstance(node, Not):
            visit(node.expr)
        elif isinstance(node, And | Or):
            visit(node.left)
            visit(node.right)
        elif isinstance(node, Projection):
            for column in node.columns:
                visit(column.source)

    for node in nodes:
        visit(node)
    return frozenset(paths)


def dotted(path: tuple[str, ...]) -> str:
    return ".".join(path)


def as_double(number: float) -> float:
    """A JSON number as both backends compare it: an integer beyond the largest double is
    infinite, as in Spark."""
    try:
        return float(number)
    except OverflowError:
        return math.inf if number > 0 else -math.inf


def json_type(value: object) -> str:
    """string, number, boolean, null, object or array; missing is passed as the MISSING marker."""
    if value is MISSING:
        return "missing"
    if value is None:
        return "null"
    if isinstance(value, bool):  # before int: bool is an int in Python
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object" if isinstance(value, dict) else "array"


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()
