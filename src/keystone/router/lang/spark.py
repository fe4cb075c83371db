"""The Spark backend: the AST compiled to Column expressions, no Python on the per-event path.

The payload is a struct with a field for each field path read, named by the dotted path
(`router.source.read_paths`): the value's JSON type (`kind`, "missing" when absent), its own
text in the event (`json`) and a string's decoded value (`string`). Each operand becomes a typed
view so that comparisons and functions follow exactly the rules the Python evaluator
(`evaluate.py`, `functions.py`) follows; a projected value read from the event is its text, as
the producer wrote it. Only Column functions are used, and router/java's LikeMatcher (`like`),
LangFunction (what Spark has no function for: a double's text, keyed hashes, masks, times) and
JsonExcept (`* except`): the user's text never reaches Spark as SQL; field paths and output
names are validated names, constants are literals.

Two views of a value. `Read`: one read from the event, its metadata or a literal, or chosen
among several (`coalesce`): its kind known per event, a reading for each kind. `Made`: what a
function made, of one kind known here (a string, a number or a boolean), null where the function
gives null, and missing where an argument is: its consumers rely on SQL's nulls (a comparison
with null is null, as the language's unknown is) and so read the function's expression once.
A function that must read an argument several times binds a made argument to a lambda's
variable first (`_bind`): a tree of calls compiles to an expression of its own size.
"""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import reduce

from pyspark import SparkContext
from pyspark.sql import Column
from pyspark.sql import functions as F

from keystone.router.lang.ast import (
    COMPARABLE,
    COMPARISONS,
    METADATA,
    REDACTED,
    And,
    Call,
    Compare,
    Const,
    Expr,
    In,
    IsNull,
    Like,
    Meta,
    Not,
    Operand,
    Or,
    Projection,
    Truth,
    as_double,
    dotted,
    json_type,
)
from keystone.router.lang.functions import (
    INTEGER,
    MAX_NUMBER_CHARS,
    NUMBER,
    WHITESPACE,
    case_table,
)


@dataclass(frozen=True)
class Read:
    """A value whose kind is known per event (`kind`: string, number, boolean, null, object,
    array or missing), with its readings as the kinds that compare, and `raw`, its JSON text as
    written (null where there is none: a literal string). A reading is read only under its
    kind."""

    kind: Column
    string: Column
    number: Column
    boolean: Column
    raw: Column
    whole: Column | None = None  # the struct it was unpacked from, when it was bound
    # A choice among values (coalesce's), whose parts read its arguments' several times: a
    # function of it binds it (`_bind`), as it binds a made value.
    computed: bool = False

    kinds = frozenset(COMPARABLE)

    def present(self, kind: str) -> Column:
        """The reading of `kind` where the value is of that kind, else null."""
        return F.when(self.kind == kind, self.reading(kind))

    def reading(self, kind: str) -> Column:
        return {"string": self.string, "number": self.number, "boolean": self.boolean}[kind]

    def reading_of(self, kind: str) -> Column:
        """Its reading as `kind`, for a reader that has checked the kind (`is_`)."""
        return self.reading(kind)

    def is_(self, kind: str) -> Column:
        return self.kind == kind

    @property
    def missing(self) -> Column:
        return self.kind == "missing"

    @property
    def absent(self) -> Column:
        """Missing or null."""
        return self.kind.isin("null", "missing")

    @property
    def text(self) -> Column:
        """A string's own, a number's digits or shortest form, `true`/`false`; else null."""
        return (
            F.when(self.kind == "string", self.string)
            .when(self.kind == "number", _number_text(self.raw))
            .when(self.kind == "boolean", self.boolean.cast("string"))
        )

    @property
    def json(self) -> Column:
        """The value as JSON text: as written where it was, else made; null when missing."""
        return (
            F.when(self.kind == "missing", None)
            .when(self.kind == "null", "null")
            .when(self.kind == "string", F.coalesce(self.raw, _quoted(self.string)))
            .when(self.kind == "number", F.coalesce(self.raw, _repr(self.number)))
            .when(self.kind == "boolean", self.boolean.cast("string"))
            .otherwise(self.raw)  # an object or an array, as written
        )

    def packed(self) -> Column:
        if self.whole is not None:
            return self.whole
        return F.struct(
            *(getattr(self, p).alias(p) for p in ("kind", "string", "number", "boolean", "raw"))
        )

    @classmethod
    def unpacked(cls, value: Column, bound: bool) -> Read:
        """The value's parts from its struct: a bound one (an expression, read through `whole`
        by whatever binds it again), or a lambda's variable (read in place)."""
        return cls(
            *(value[p] for p in ("kind", "string", "number", "boolean", "raw")),
            whole=value if bound else None,
            computed=bound,
        )


@dataclass(frozen=True)
class Made:
    """What a function made: `value`, of the one kind `static` (a number as a double, or as a
    bigint where `integer`), null where the function gives null; `missing` where an argument is
    missing; `raw`, a number's text as written where it has one (`to_number`'s). `plain`: a
    string with nothing to escape in JSON (a hash's hex, a date), quoted as it is."""

    static: str
    value: Column
    missing: Column
    raw: Column | None = None
    integer: bool = False
    whole: Column | None = None
    plain: bool = False
    # Null wherever an argument is missing (every function but redact, whose marker stands for
    # any value): a reader of its value needs no test of `missing` then.
    null_when_missing: bool = True

    computed = True

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset([self.static])

    @property
    def kind(self) -> Column:
        return (
            F.when(self.missing, "missing").when(self.value.isNull(), "null").otherwise(self.static)
        )

    def present(self, kind: str) -> Column:
        """The value where it is present and of `kind` (never another kind), else null."""
        if kind != self.static:
            return _none({"string": "string", "number": "double", "boolean": "boolean"}[kind])
        value = self.value.cast("double") if self.integer else self.value
        return value if self.null_when_missing else F.when(~self.missing, value)

    def reading_of(self, kind: str) -> Column:
        return self.present(kind)

    def is_(self, kind: str) -> Column:
        """Where it is present, of `kind`: its nulls are SQL's, which every reader keeps."""
        return ~self.missing if kind == self.static else F.lit(False)

    @property
    def absent(self) -> Column:
        return self.missing | self.value.isNull()

    @property
    def text(self) -> Column:
        if self.static == "string":
            return F.when(~self.missing, self.value)
        if self.static == "boolean" or self.integer:
            return F.when(~self.missing, self.value.cast("string"))
        if self.raw is not None:
            return F.when(~self.missing, _number_text(self.raw))
        return F.when(~self.missing, _repr(self.value))

    @property
    def json(self) -> Column:
        if self.static == "string":
            made = (
                F.concat(F.lit('"'), self.value, F.lit('"')) if self.plain else _quoted(self.value)
            )
        elif self.static == "boolean" or self.integer:
            made = self.value.cast("string")
        else:
            made = (
                _repr(self.value) if self.raw is None else F.coalesce(self.raw, _repr(self.value))
            )
        return F.when(~self.missing, F.coalesce(made, F.lit("null")))

    def packed(self) -> Column:
        if self.whole is not None:
            return self.whole
        raw = self.raw if self.raw is not None else _none("string")
        return F.struct(self.value.alias("value"), self.missing.alias("missing"), raw.alias("raw"))

    def unpacked(self, value: Column, bound: bool) -> Made:
        raw = value["raw"] if self.raw is not None else None
        whole = value if bound else None
        return replace(self, value=value["value"], missing=value["missing"], raw=raw, whole=whole)


Typed = Read | Made


def _none(kind: str) -> Column:
    """A null of a Spark type (made where a session is active, as every Column must be)."""
    return F.lit(None).cast(kind)


def field_value(payload: Column, path: tuple[str, ...]) -> Column:
    """The value at `path`: a struct of its `kind`, `json` text and decoded `string`."""
    return payload[dotted(path)]


def _field(value: Column) -> Read:
    kind, json = value["kind"], value["json"]
    # A JSON number's text is a valid double's (a larger one reads as infinite, as in Python).
    return Read(kind, value["string"], _double_of(json), json == "true", json)


def _double_of(text: Column) -> Column:
    """A JSON number's text as a double, as Python reads it: `-0` is an integer, 0, where a
    double's text `-0.0` is negative zero."""
    return F.when(text == "-0", F.lit(0.0)).otherwise(text.try_cast("double"))


def _number_text(raw: Column) -> Column:
    """A number's text from its JSON text: an integer's digits as written (`-0` is `0`, as
    Python reads it), else the double's shortest form (`functions.number_text`)."""
    return _lang("numtext", raw)


def _repr(number: Column) -> Column:
    return _lang("repr", number)


def _quoted(string: Column) -> Column:
    return _lang("quote", string)


def _lang(op: str, value: Column, data: bytes = b"", keep: int = 0) -> Column:
    """router/java/LangFunction.java's `op` of `value` (`data`: hash's key, case's table;
    `keep`: mask's)."""
    jvm = SparkContext._active_spark_context._jvm
    return Column(jvm.LangFunction.column(op, value._jc, bytearray(data), keep))


@functools.cache
def _case_data(mapping: str) -> bytes:
    """`functions.case_table` as LangFunction reads it: a character, \\x01, what it maps to,
    \\x00, for each."""
    table = case_table(mapping)
    return "".join(f"{char}\x01{mapped}\x00" for char, mapped in table.items()).encode()


def _typed(operand: Operand, scope: Scope) -> Typed:
    if isinstance(operand, Const):
        kind, value = json_type(operand.value), operand.value
        return Read(
            F.lit(kind),
            F.lit(value if kind == "string" else None).cast("string"),
            # Read as a double, like every number; an integer over 64 bits has no Spark literal.
            F.lit(as_double(value) if kind == "number" else None).cast("double"),
            F.lit(value if kind == "boolean" else None).cast("boolean"),
            F.lit(json.dumps(value) if kind == "number" else None).cast("string"),
        )
    if isinstance(operand, Meta):
        column = scope.metadata[operand.name]
        kind = METADATA[operand.name]
        present = F.when(column.isNull(), "missing").otherwise(kind)
        if kind == "number":
            number, raw = column.cast("double"), column.cast("string")
            return Read(present, _none("string"), number, _none("boolean"), raw)
        return Read(present, column, _none("double"), _none("boolean"), _none("string"))
    if isinstance(operand, Call):
        return _call(operand, [_typed(a, scope) for a in operand.args], scope.key)
    return _field(field_value(scope.payload, operand.path))


def _bind(
    args: list[Typed], body: Callable[[list[Typed]], Column], bound_only: bool = False
) -> Column:
    """`body` of `args`, each made argument's expression appearing once: the arguments are
    bound to a lambda's variable (Spark's `transform` over a one-element array), which the body
    reads as often as it needs; arguments read from the event are read in place. `bound_only`:
    bind only values that were bound already (a consumer at the top: it reads a made value
    once, a bound one several times)."""
    if not any(a.whole is not None if bound_only else a.computed for a in args):
        return body(args)
    packed = F.array(F.struct(*(a.packed().alias(f"a{i}") for i, a in enumerate(args))))

    def apply(value: Column) -> Column:
        return body([_unpack(a, value[f"a{i}"], False) for i, a in enumerate(args)])

    return F.transform(packed, apply)[0]


def _unpack(like: Typed, value: Column, bound: bool) -> Typed:
    return like.unpacked(value, bound) if isinstance(like, Made) else Read.unpacked(value, bound)


# Functions that read each argument once: their made arguments need no binding.
_READ_ONCE = {"hash", "mask", "redact", "lower", "upper", "trim", "length", "to_string"}
_READ_ONCE |= {"concat", "date_of", "+", "-", "*", "/"}


def _call(call: Call, args: list[Typed], key: bytes | None) -> Typed:
    """A function's value, as `functions.call` defines it: missing where an argument is (but
    for coalesce), null where one is null (each function keeps SQL's nulls), else the
    function's."""
    if call.name == "hash" and key is None:
        raise ValueError("hash needs the stream's key")
    reads_once = call.name in _READ_ONCE or (
        call.name == "to_timestamp" and _form(call) == "iso8601"
    )
    # A made value is read once by such a function; a choice (coalesce's), read through its
    # kind, is read several times by any.
    if not any(a.computed and (not reads_once or isinstance(a, Read)) for a in args):
        return _function(call, args, key)
    made: list[Typed] = []  # what the function made of the bound arguments: its shape

    def body(inner: list[Typed]) -> Column:
        made.append(_function(call, inner, key))
        return made[0].packed()

    bound = _bind(args, body)
    return _unpack(made[0], bound, True)


def _form(call: Call) -> str:
    return call.args[1].value  # type: ignore[union-attr, return-value]


def _function(call: Call, args: list[Typed], key: bytes | None) -> Typed:
    name, first = call.name, args[0]
    if name == "coalesce":
        return _coalesce(args)
    missing = _any(a.missing for a in args)
    if name == "redact":
        return Made("string", F.lit(REDACTED), missing, plain=True, null_when_missing=False)
    string = first.present("string")
    if name in ("hash", "mask", "lower", "upper", "trim", "to_string", "concat", "substring"):
        plain = name == "hash"  # hex
        return Made("string", _string_function(call, args, key), missing, plain=plain)
    if name == "length":
        return Made("number", F.char_length(string).cast("bigint"), missing, integer=True)
    if name == "to_number":
        return _to_number(first, missing)
    if name == "to_bool":
        return Made("boolean", _to_bool(first), missing)
    if name == "to_timestamp":
        return Made("number", _to_timestamp(first, _form(call)), missing, integer=True)
    if name == "date_of":
        return Made("string", _lang("date", first.present("number")), missing, plain=True)
    left, right = first.present("number"), args[1].present("number")
    result = F.try_divide(left, right) if name == "/" else COMPUTE[name](left, right)
    return Made("number", _lang("finite", result), missing)


COMPUTE = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def _string_function(call: Call, args: list[Typed], key: bytes | None) -> Column:
    name, first = call.name, args[0]
    string = first.present("string")
    if name == "hash":
        return _lang("hash", first.text, key or b"")
    if name == "mask":
        return _lang("mask", first.text, keep=_form(call))  # type: ignore[arg-type]
    if name in ("lower", "upper"):
        return _lang("case", string, _case_data(name))
    if name == "trim":
        return F.btrim(string, F.lit(WHITESPACE))
    if name == "to_string":
        return first.text
    if name == "concat":
        return F.concat(*(a.text for a in args))
    return _substring(string, args[1], args[2])


def _to_number(value: Typed, missing: Column) -> Made:
    """A number as it is (its text as written kept); a string holding a JSON number (trimmed)
    as that number, its text as written in the string."""
    trimmed = F.btrim(value.present("string"), F.lit(WHITESPACE))
    # \z, not $: Java's $ also matches before a final line separator.
    readable = (F.char_length(trimmed) <= MAX_NUMBER_CHARS) & trimmed.rlike(
        f"^(?:{NUMBER.pattern})\\z"
    )
    number = trimmed.try_cast("double")
    integer = trimmed.rlike(f"^(?:{INTEGER.pattern})\\z")
    # Python reads an integer's text exactly, anything else as a double (null: not finite).
    read = F.when(readable & (integer | (F.abs(number) != float("inf"))), trimmed)
    if isinstance(value, Made):  # a number made: as it is; a string made: read
        if value.static == "number":
            return replace(value, missing=missing)
        return Made("number", _double_of(read), missing, raw=read)
    is_number = value.is_("number")
    raw = F.when(is_number, value.raw).otherwise(read)
    return Made(
        "number",
        F.when(is_number, value.number).otherwise(_double_of(read)),
        missing,
        raw=raw,
    )


def _to_bool(value: Typed) -> Column:
    word = F.lower(value.present("string"))
    number = value.present("number")
    return F.coalesce(
        value.present("boolean"),
        F.when(number == 1, True).when(number == 0, False),
        F.when(word.isin("true", "1"), True).when(word.isin("false", "0"), False),
    )


def _to_timestamp(value: Typed, form: str) -> Column:
    if form == "iso8601":
        return _lang("iso8601", value.present("string"))
    scale = 1000 if form == "epoch_s" else 1
    return _lang("millis", value.present("number") * scale)


def _substring(string: Column, start: Typed, length: Typed) -> Column:
    first, count = start.present("number"), length.present("number")
    finite = (F.abs(first) != float("inf")) & (F.abs(count) != float("inf"))
    # A double from 2^53 up is a whole number (where floor, a bigint, would saturate at 2^63).
    whole = (
        finite
        & ((first >= 2.0**53) | (F.floor(first) == first))
        & ((count >= 2.0**53) | (F.floor(count) == count))
    )
    valid = whole & (first >= 1) & (count >= 0)
    biggest = 2**31 - 1  # past any string's end: as far as Python's slice goes
    at = F.least(first, F.lit(float(biggest))).try_cast("int")
    size = F.least(count, F.lit(float(biggest))).try_cast("int")
    return F.when(valid, F.when(at > F.char_length(string), "").otherwise(string.substr(at, size)))


def _coalesce(args: list[Typed]) -> Read:
    """The first argument neither missing nor null; else null, or missing if all are."""
    views = [a if isinstance(a, Read) else _as_read(a) for a in args]
    result = Read(
        F.when(_all(v.missing for v in views), "missing").otherwise("null"),
        _none("string"),
        _none("double"),
        _none("boolean"),
        _none("string"),
    )
    for view in reversed(views):
        chosen = ~view.absent
        result = Read(
            *(
                F.when(chosen, getattr(view, p)).otherwise(getattr(result, p))
                for p in ("kind", "string", "number", "boolean", "raw")
            ),
            computed=True,
        )
    return result


def _as_read(value: Made) -> Read:
    """A made value as a read one (for coalesce, which chooses among values of any kind)."""
    none = {"string": _none("string"), "number": _none("double"), "boolean": _none("boolean")}
    readings = {**none, value.static: value.present(value.static)}
    raw = value.json if value.static == "number" else _none("string")
    return Read(value.kind, readings["string"], readings["number"], readings["boolean"], raw)


def _any(conditions: Iterable[Column]) -> Column:
    return reduce(operator.or_, conditions, F.lit(False))


def _all(conditions: Iterable[Column]) -> Column:
    return reduce(operator.and_, conditions, F.lit(True))


@dataclass(frozen=True)
class Scope:
    """What an expression is compiled against: the payload's struct of field paths, the
    metadata's columns, and the stream's key for `hash` (None: a spec without it)."""

    payload: Column
    metadata: Mapping[str, Column]
    key: bytes | None = None


def compile_filter(expr: Expr | None, scope: Scope) -> Column:
    """A boolean Column, true exactly when the Python evaluator's `matches` is."""
    if expr is None:
        return F.lit(True)
    return F.coalesce(_truth(expr, scope), F.lit(False))


def _kinds(operand: Operand, typed: Typed) -> set[str]:
    """The JSON types the operand can have, among those that compare: a constant has one."""
    if isinstance(operand, Const):
        return {json_type(operand.value)} & set(COMPARABLE)
    return set(typed.kinds)


def _is(operand: Operand, typed: Typed, kind: str) -> Column:
    # A constant's type is known here; asking Spark would only add a trivially true test.
    return F.lit(True) if isinstance(operand, Const) else typed.is_(kind)


def _truth(expr: Expr, scope: Scope) -> Column:
    if isinstance(expr, Compare):
        sides = [_typed(expr.left, scope), _typed(expr.right, scope)]
        return _bind(sides, lambda both: _compare(expr, *both), bound_only=True)
    if isinstance(expr, In):
        return _read(_typed(expr.operand, scope), lambda value: _member(expr, value))
    if isinstance(expr, IsNull):
        return _read(_typed(expr.operand, scope), lambda value: value.absent)
    if isinstance(expr, Like):
        return _read(
            _typed(expr.operand, scope),
            lambda value: _like(value.present("string"), expr.pattern),
        )
    if isinstance(expr, Truth):
        return _read(_typed(expr.operand, scope), lambda value: value.present("boolean"))
    if isinstance(expr, Not):
        return ~_truth(expr.expr, scope)
    if isinstance(expr, And):
        return _truth(expr.left, scope) & _truth(expr.right, scope)
    if isinstance(expr, Or):
        return _truth(expr.left, scope) | _truth(expr.right, scope)
    raise TypeError(f"not an expression: {expr!r}")


def _read(value: Typed, test: Callable[[Typed], Column]) -> Column:
    """A test of one value, read once if it was bound (`_bind`)."""
    return _bind([value], lambda bound: test(bound[0]), bound_only=True)


def _compare(expr: Compare, left: Typed, right: Typed) -> Column:
    """True or false where both sides are of one kind that compares, else null (unknown)."""
    result = F.lit(None).cast("boolean")
    for kind in sorted(_kinds(expr.left, left) & _kinds(expr.right, right)):
        same = _is(expr.left, left, kind) & _is(expr.right, right, kind)
        value = COMPARISONS[expr.op](left.reading_of(kind), right.reading_of(kind))
        result = F.when(same, value).otherwise(result)
    return result


def _member(expr: In, typed: Typed) -> Column:
    """`operand in (...)` as the Python evaluator reads it, flat however long the list: for each
    JSON type the operand may have, one `isin` over the list's values of that type (numbers as
    doubles). It is true when that finds the value; else unknown if the list holds a value of
    another type or a null (an unknown equality), else false. Other types: unknown."""
    result = F.lit(None).cast("boolean")
    for kind in sorted(_kinds(expr.operand, typed)):
        same = [c.value for c in expr.values if json_type(c.value) == kind]
        if not same:
            continue  # every equality is unknown: so is the whole
        if kind == "number":
            same = [as_double(v) for v in same]
        found = typed.reading_of(kind).isin(same)
        if len(same) < len(expr.values):
            found = F.when(found, True)  # not found: unknown, null
        result = F.when(_is(expr.operand, typed, kind), found).otherwise(result)
    return result


def _like(value: Column, pattern: str) -> Column:
    """`value like pattern` by router/java/LikeMatcher.java, linear where Spark's own LIKE (a
    backtracking regular expression) is not, and counting code points as Python does."""
    jvm = SparkContext._active_spark_context._jvm
    return Column(jvm.LikeMatcher.column(value._jc, pattern))


def compile_projection(projection: Projection, raw: Column, scope: Scope) -> Column:
    """The output record as JSON text: the chosen fields, each value its text in the event (a
    missing field is left out, a JSON null stays null) or the value the language computed;
    for '*', after the event's own text (less its `except` paths and the chosen names, by
    router/java/JsonExcept.java), or that text alone."""
    members = []
    for column in projection.columns:
        # Output names are validated names: nothing in them to escape.
        name = F.lit(f'"{column.name}":')
        # A missing value's json is null: so is the member, which concat_ws leaves out.
        member = _read(
            _typed(column.source, scope), lambda value, name=name: F.concat(name, value.json)
        )
        members.append(member)
    chosen = F.concat_ws(",", *members)
    if not projection.whole:
        return F.concat(F.lit("{"), chosen, F.lit("}"))
    if not projection.columns and not projection.dropped:
        return raw
    left_out = [*projection.dropped, *((c.name,) for c in projection.columns)]
    jvm = SparkContext._active_spark_context._jvm
    paths = ",".join(dotted(path) for path in left_out)
    kept = Column(jvm.JsonExcept.column(raw._jc, paths))
    return (
        F.when(chosen == "", kept)
        .when(kept == "{}", F.concat(F.lit("{"), chosen, F.lit("}")))
        .otherwise(
            F.concat(kept.substr(F.lit(1), F.length(kept) - 1), F.lit(","), chosen, F.lit("}"))
        )
    )
