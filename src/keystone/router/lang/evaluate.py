"""The pure-Python backend: previews, the load test's audit, and the reference the Spark
compiler is tested against. `event` is the parsed payload; `metadata` holds guid, timestamp
(epoch ms), host and app; `key` is the stream's key for `hash` (control holds it)."""

from __future__ import annotations

from typing import Any

from keystone.contracts.envelope import JSON_SPACE, STRICT_JSON
from keystone.router.lang import functions, like
from keystone.router.lang.ast import (
    COMPARABLE,
    COMPARISONS,
    MISSING,
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
    json_type,
)

Truth3 = bool | None  # three-valued: None is unknown


def read_event(value: bytes) -> Any:
    """An event's bytes as the router reads them (`router.source`): strict UTF-8 with no byte
    order mark, strict JSON (NaN refused), its first value (text after it is ignored, as Spark's
    readers ignore it). ValueError when that is not JSON."""
    text = value.decode()  # a UnicodeDecodeError is a ValueError
    event, _ = STRICT_JSON.raw_decode(text.lstrip(JSON_SPACE))
    return event


def value_of(
    operand: Operand, event: dict[str, Any], metadata: dict[str, Any], key: bytes | None = None
) -> Any:
    if isinstance(operand, Const):
        return operand.value
    if isinstance(operand, Meta):
        return metadata.get(operand.name, MISSING)
    if isinstance(operand, Call):
        args = [value_of(arg, event, metadata, key) for arg in operand.args]
        return functions.call(operand.name, args, key)
    value: Any = event
    for step in operand.path:
        if not isinstance(value, dict) or step not in value:
            return MISSING
        value = value[step]
    return value


def truth(
    expr: Expr, event: dict[str, Any], metadata: dict[str, Any], key: bytes | None = None
) -> Truth3:
    if isinstance(expr, Compare):
        left, right = (
            value_of(expr.left, event, metadata, key),
            value_of(expr.right, event, metadata, key),
        )
        kind = json_type(left)
        if kind != json_type(right) or kind not in COMPARABLE:
            return None
        if kind == "number":  # as doubles, as Spark compares them
            left, right = as_double(left), as_double(right)
        return COMPARISONS[expr.op](left, right)
    if isinstance(expr, In):
        return _member(value_of(expr.operand, event, metadata, key), expr.values)
    if isinstance(expr, IsNull):
        return json_type(value_of(expr.operand, event, metadata, key)) in ("null", "missing")
    if isinstance(expr, Like):
        value = value_of(expr.operand, event, metadata, key)
        if json_type(value) != "string":
            return None
        return like.matches(expr.pattern, value)
    if isinstance(expr, Truth):
        value = value_of(expr.operand, event, metadata, key)
        return value if json_type(value) == "boolean" else None
    if isinstance(expr, Not):
        inner = truth(expr.expr, event, metadata, key)
        return None if inner is None else not inner
    if isinstance(expr, And):
        left, right = (
            truth(expr.left, event, metadata, key),
            truth(expr.right, event, metadata, key),
        )
        if left is False or right is False:
            return False
        return None if left is None or right is None else True
    if isinstance(expr, Or):
        left, right = (
            truth(expr.left, event, metadata, key),
            truth(expr.right, event, metadata, key),
        )
        if left is True or right is True:
            return True
        return None if left is None or right is None else False
    raise TypeError(f"not an expression: {expr!r}")


def matches(
    expr: Expr | None,
    event: dict[str, Any],
    metadata: dict[str, Any],
    key: bytes | None = None,
) -> bool:
    """Whether a filter keeps the event: only when it is true (no filter keeps everything)."""
    return expr is None or truth(expr, event, metadata, key) is True


def _member(value: Any, values: tuple[Const, ...]) -> Truth3:
    """`value in values`: the OR of `value = v` (a Compare each), in one loop over the list.
    True if one equality is; else unknown if one is (a value of another JSON type, a null);
    else false."""
    kind = json_type(value)
    if kind not in COMPARABLE:
        return None  # every equality is unknown
    if kind == "number":
        value = as_double(value)
    unknown = False
    for const in values:
        other = const.value
        if json_type(other) != kind:
            unknown = True
        elif (as_double(other) if kind == "number" else other) == value:
            return True
    return None if unknown else False


def project(
    projection: Projection,
    event: dict[str, Any],
    metadata: dict[str, Any],
    key: bytes | None = None,
) -> dict:
    """The output record: the chosen fields (a missing one is left out), after the whole payload
    (less the paths `* except` leaves out, and the fields named like chosen ones) for `*`."""
    record = _without(event, projection.dropped) if projection.whole else {}
    if projection.columns and record is event:
        record = dict(event)
    for column in projection.columns:
        record.pop(column.name, None)
        value = value_of(column.source, event, metadata, key)
        if value is not MISSING:
            record[column.name] = value
    return record


def _without(event: dict[str, Any], paths: tuple[tuple[str, ...], ...]) -> dict[str, Any]:
    """The object less the values at `paths` (through objects only), copied where it changes."""
    if not paths:
        return event
    record = dict(event)
    inner: dict[str, list[tuple[str, ...]]] = {}
    for path in paths:
        if len(path) == 1:
            record.pop(path[0], None)
        else:
            inner.setdefault(path[0], []).append(path[1:])
    for name, rest in inner.items():
        if isinstance(record.get(name), dict):
            record[name] = _without(record[name], tuple(rest))
    return record
