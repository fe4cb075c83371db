"""The Spark backend: the AST compiled to Column expressions, no Python on the per-event path.

The payload is a struct with a field for each field path read, named by the dotted path
(`router.source.read_paths`): the value's JSON type (`kind`, "missing" when absent), its own
text in the event (`json`) and a string's decoded value (`string`). Each operand becomes a typed
view (its JSON type, and its value read as a string, a double and a boolean) so comparisons
follow exactly the rules the Python evaluator follows; a projected value is its text, as the
producer wrote it. Only Column functions are used, and router/java/LikeMatcher.java for `like`:
the user's text never reaches Spark as SQL; field paths and output names are validated names,
constants are literals.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark import SparkContext
from pyspark.sql import Column
from pyspark.sql import functions as F

from keystone.router.lang.ast import (
    COMPARABLE,
    COMPARISONS,
    METADATA,
    And,
    Compare,
    Const,
    Expr,
    Field,
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


@dataclass(frozen=True)
class Typed:
    kind: Column  # string, number, boolean, null, object, array or missing
    string: Column
    number: Column
    boolean: Column

    def reading(self, kind: str) -> Column:
        return {"string": self.string, "number": self.number, "boolean": self.boolean}[kind]


def field_value(payload: Column, path: tuple[str, ...]) -> Column:
    """The value at `path`: a struct of its `kind`, `json` text and decoded `string`."""
    return payload[dotted(path)]


def _field(value: Column) -> Typed:
    json = value["json"]
    # A JSON number's text is a valid double's (a larger one reads as infinite, as in Python).
    return Typed(value["kind"], value["string"], json.try_cast("double"), json == "true")


def _typed(operand: Operand, payload: Column, metadata: Mapping[str, Column]) -> Typed:
    if isinstance(operand, Const):
        kind, value = json_type(operand.value), operand.value
        return Typed(
            F.lit(kind),
            F.lit(value if kind == "string" else None).cast("string"),
            # Read as a double, like every number; an integer over 64 bits has no Spark literal.
            F.lit(as_double(value) if kind == "number" else None).cast("double"),
            F.lit(value if kind == "boolean" else None).cast("boolean"),
        )
    if isinstance(operand, Meta):
        column = metadata[operand.name]
        kind = METADATA[operand.name]
        return Typed(
            F.when(column.isNull(), "missing").otherwise(kind),
            column.cast("string"),
            column.cast("double"),
            F.lit(None).cast("boolean"),
        )
    return _field(field_value(payload, operand.path))


def compile_filter(expr: Expr | None, payload: Column, metadata: Mapping[str, Column]) -> Column:
    """A boolean Column, true exactly when the Python evaluator's `matches` is."""
    if expr is None:
        return F.lit(True)
    return F.coalesce(_truth(expr, payload, metadata), F.lit(False))


def _kinds(operand: Operand) -> set[str]:
    """The JSON types the operand can have, among those that compare: a constant has one."""
    if isinstance(operand, Const):
        return {json_type(operand.value)} & set(COMPARABLE)
    return set(COMPARABLE)


def _is(operand: Operand, typed: Typed, kind: str) -> Column:
    # A constant's type is known here; asking Spark would only add a trivially true test.
    return F.lit(True) if isinstance(operand, Const) else typed.kind == kind


def _truth(expr: Expr, payload: Column, metadata: Mapping[str, Column]) -> Column:
    if isinstance(expr, Compare):
        left = _typed(expr.left, payload, metadata)
        right = _typed(expr.right, payload, metadata)
        result = F.lit(None).cast("boolean")  # same JSON type on both sides, else unknown
        for kind in sorted(_kinds(expr.left) & _kinds(expr.right)):
            same = _is(expr.left, left, kind) & _is(expr.right, right, kind)
            value = COMPARISONS[expr.op](left.reading(kind), right.reading(kind))
            result = F.when(same, value).otherwise(result)
        return result
    if isinstance(expr, In):
        return _member(expr, _typed(expr.operand, payload, metadata))
    if isinstance(expr, IsNull):
        return _typed(expr.operand, payload, metadata).kind.isin("null", "missing")
    if isinstance(expr, Like):
        value = _typed(expr.operand, payload, metadata)
        return F.when(value.kind == "string", _like(value.string, expr.pattern))
    if isinstance(expr, Truth):
        value = _typed(expr.operand, payload, metadata)
        return F.when(value.kind == "boolean", value.boolean)
    if isinstance(expr, Not):
        return ~_truth(expr.expr, payload, metadata)
    if isinstance(expr, And):
        return _truth(expr.left, payload, metadata) & _truth(expr.right, payload, metadata)
    if isinstance(expr, Or):
        return _truth(expr.left, payload, metadata) | _truth(expr.right, payload, metadata)
    raise TypeError(f"not an expression: {expr!r}")


def _member(expr: In, typed: Typed) -> Column:
    """`operand in (...)` as the Python evaluator reads it, flat however long the list: for each
    JSON type the operand may have, one `isin` over the list's values of that type (numbers as
    doubles). It is true when that finds the value; else unknown if the list holds a value of
    another type or a null (an unknown equality), else false. Other types: unknown."""
    result = F.lit(None).cast("boolean")
    for kind in sorted(_kinds(expr.operand)):
        same = [c.value for c in expr.values if json_type(c.value) == kind]
        if not same:
            continue  # every equality is unknown: so is the whole
        if kind == "number":
            same = [as_double(v) for v in same]
        found = typed.reading(kind).isin(same)
        if len(same) < len(expr.values):
            found = F.when(found, True)  # not found: unknown, null
        result = F.when(_is(expr.operand, typed, kind), found).otherwise(result)
    return result


def _like(value: Column, pattern: str) -> Column:
    """`value like pattern` by router/java/LikeMatcher.java, linear where Spark's own LIKE (a
    backtracking regular expression) is not, and counting code points as Python does."""
    jvm = SparkContext._active_spark_context._jvm
    return Column(jvm.LikeMatcher.column(value._jc, pattern))


def compile_projection(
    projection: Projection, payload: Column, raw: Column, metadata: Mapping[str, Column]
) -> Column:
    """The output record as JSON text: the event's own text for '*', else an object of the
    chosen fields, each value its text in the event (a missing field is left out, a JSON null
    stays null)."""
    if projection.whole:
        return raw
    members = []
    for column in projection.columns:
        if isinstance(column.source, Field):
            json = field_value(payload, column.source.path)["json"]
        else:
            json = _meta_json(metadata[column.source.name], METADATA[column.source.name])
        # Output names are validated names: nothing in them to escape.
        members.append(F.concat(F.lit(f'"{column.name}":'), json))
    return F.concat(F.lit("{"), F.concat_ws(",", *members), F.lit("}"))


def _meta_json(value: Column, kind: str) -> Column:
    """A metadata value as JSON text, null when absent."""
    if kind == "number":
        return value.cast("string")
    quoted = F.to_json(F.struct(value.alias("v")))  # {"v":"..."}, escaped as JSON requires
    return F.when(value.isNotNull(), quoted.substr(F.lit(6), F.length(quoted) - 6))
