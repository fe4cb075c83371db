"""The Avro schema checks of `contracts.schema`: the proxy's verdicts agree with fastavro's (but
for the differences the module documents), the problems name the field at fault, the check's
work grows with the event and not with how often the schema uses its named types, and no
schema, however nested, gets past the limits or raises anything but a ValueError."""

from __future__ import annotations

import contextlib
import itertools
import json
from typing import Any

import pytest
from fastavro.validation import validate
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from keystone.contracts.limits import Limits
from keystone.contracts.schema import (
    HARD_MAX_SCHEMA_DEPTH,
    check_budget,
    parse_schema,
    schema_depth,
    schema_limit_problems,
    schema_problems,
    schema_size,
)


def record(name: str, fields: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": fields, **extra}


def user() -> dict[str, Any]:
    return record("U", [{"name": "id", "type": "string"}])


def test_an_optional_nested_record_is_checked_inside() -> None:
    parsed = parse_schema(record("E", [{"name": "u", "type": ["null", user()]}]))
    assert schema_problems({"u": {"id": "x"}}, parsed) == []
    assert schema_problems({"u": None}, parsed) == []
    assert schema_problems({}, parsed) == []
    assert schema_problems({"u": {"id": 1}}, parsed) == [
        {"path": "u.id", "message": "expected string, got an integer"}
    ]
    assert schema_problems({"u": 3}, parsed) == [
        {"path": "u", "message": "expected null or U, got an integer"}
    ]


def test_an_object_is_checked_against_the_record_it_meant() -> None:
    a = record("A", [{"name": "x", "type": "long"}])
    b = record("B", [{"name": "y", "type": "string"}])
    parsed = parse_schema(record("E", [{"name": "v", "type": ["null", a, b]}]))
    assert schema_problems({"v": {"y": "s"}}, parsed) == []
    # The one whose fields it has; the one its "-type" names; else the first.
    assert schema_problems({"v": {"y": 5}}, parsed) == [
        {"path": "v.y", "message": "expected string, got an integer"}
    ]
    assert schema_problems({"v": {"-type": "B"}}, parsed) == [
        {"path": "v.y", "message": "expected string, got null"}
    ]
    assert schema_problems({"v": {}}, parsed) == [
        {"path": "v.x", "message": "expected long, got null"}
    ]
    assert schema_problems({"v": {"-type": "C", "x": 1}}, parsed) == [
        {"path": "v", "message": "expected null or A or B, got an object"}
    ]
    assert schema_problems({"-type": "F", "v": None}, parsed) == [
        {"path": "(event)", "message": "expected E, got an object whose '-type' is \"F\""}
    ]


def test_a_union_takes_what_any_branch_takes() -> None:
    branches = ["null", {"type": "map", "values": "string"}, user()]
    parsed = parse_schema(record("E", [{"name": "u", "type": branches}]))
    assert schema_problems({"u": {"name": "x"}}, parsed) == []  # a map, though not a U
    assert schema_problems({"u": {"name": 1}}, parsed) == [
        {"path": "u.id", "message": "expected string, got null"}
    ]


def test_extra_fields_are_allowed() -> None:
    parsed = parse_schema(record("E", [{"name": "u", "type": user()}]))
    assert schema_problems({"u": {"id": "x", "more": 1}, "more": [2]}, parsed) == []


def test_deliberate_differences_from_fastavro() -> None:
    """Each is what `router.avro` decides too."""
    blob = parse_schema(record("E", [{"name": "b", "type": "bytes", "default": "\u00ff"}]))
    assert schema_problems({}, blob) == []
    assert not validate({}, blob, raise_errors=False)  # it judges the default itself

    nested = parse_schema(record("E", [{"name": "u", "type": user()}]))
    assert schema_problems({"u": {"-type": "U", "id": "x"}}, nested) == []
    assert not validate({"u": {"-type": "U", "id": "x"}}, nested, raise_errors=False)

    date = parse_schema(
        record("E", [{"name": "d", "type": {"type": "int", "logicalType": "date"}}])
    )
    assert schema_problems({"d": "2024-01-02"}, date) == [
        {"path": "d", "message": "expected int, got a string"}
    ]
    assert validate({"d": "2024-01-02"}, date, raise_errors=False)


# Schemas as fastavro takes them: `realise` names the named types and points each reference at
# one defined before it (never at one it is inside: a recursive type).
SIMPLE = st.sampled_from(
    [
        *("null", "boolean", "int", "long", "float", "double", "string", "bytes"),
        {"type": "long", "logicalType": "timestamp-millis"},
        {"type": "string", "logicalType": "uuid"},
        {"type": "int", "logicalType": "time-millis"},
    ]
)


def _complex(inner: st.SearchStrategy) -> st.SearchStrategy:
    fields = st.lists(st.tuples(inner, st.booleans()), max_size=3)
    return st.one_of(
        inner.map(lambda t: {"type": "array", "items": t}),
        inner.map(lambda t: {"type": "map", "values": t}),
        st.lists(inner, min_size=1, max_size=3),
        fields.map(lambda fs: {"type": "record", "fields": fs}),
        st.lists(st.sampled_from("abc"), min_size=1, unique=True).map(
            lambda s: {"type": "enum", "symbols": s}
        ),
        st.integers(0, 2).map(lambda n: {"type": "fixed", "size": n}),
        st.integers(0, 9).map(lambda k: {"ref": k}),
    )


SHAPES = st.lists(
    st.tuples(st.recursive(SIMPLE, _complex, max_leaves=10), st.booleans()), min_size=1, max_size=4
)
NO_DEFAULT = object()
EASY_DEFAULTS = {
    **{"null": None, "boolean": True, "int": 0, "long": 0, "float": 0.5, "double": 0.5},
    **{"string": "s", "array": [], "map": {}},
}


def realise(fields: list[tuple[Any, bool]]) -> dict[str, Any]:
    """The schema of a generated shape; a field flagged True gets a default if its type has an
    easy one, never for bytes and fixed (a documented difference from fastavro)."""
    numbers = itertools.count(1)
    defined: dict[str, Any] = {}

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(b) for b in node]
        if "ref" in node:
            names = list(defined)
            return names[node["ref"] % len(names)] if names else "string"
        if isinstance(node, str) or "logicalType" in node:
            return node
        if node["type"] == "array":
            return {"type": "array", "items": walk(node["items"])}
        if node["type"] == "map":
            return {"type": "map", "values": walk(node["values"])}
        named = {**node, "name": f"N{next(numbers)}"}
        if node["type"] == "record":
            named["fields"] = [field(i, *f) for i, f in enumerate(node["fields"])]
        defined[named["name"]] = named
        return named

    def field(index: int, shape: Any, defaulted: bool) -> dict[str, Any]:
        made = {"name": "abcd"[index], "type": walk(shape)}
        if defaulted and (default := default_of(made["type"])) is not NO_DEFAULT:
            made["default"] = default
        return made

    def default_of(schema: Any) -> Any:
        schema = defined.get(schema, schema) if isinstance(schema, str) else schema
        if isinstance(schema, list):
            return default_of(schema[0])  # Avro's rule: the first branch's
        if isinstance(schema, dict):
            if schema["type"] == "enum":
                return schema["symbols"][0]
            return EASY_DEFAULTS.get(schema["type"], NO_DEFAULT)
        return EASY_DEFAULTS.get(schema, NO_DEFAULT)

    return record("N0", [field(i, *f) for i, f in enumerate(fields)], namespace="ks")


JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.floats(allow_nan=False),
    st.text(max_size=2),
    st.sampled_from([[], {}, "ks.N1", "a"]),
)
BOUNDS = st.sampled_from([2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63 - 1, 2**63, -(2**63)])


def values(schema: Any, named: dict[str, Any]) -> st.SearchStrategy:
    """Values near `schema`: one part in ten is junk, so both verdicts are common."""
    return st.integers(0, 9).flatmap(lambda k: JUNK if k == 0 else _near(schema, named))


def _near(schema: Any, named: dict[str, Any]) -> st.SearchStrategy:
    if isinstance(schema, str) and schema in named:
        return _near(named[schema], named)
    if isinstance(schema, list):
        return st.one_of([values(b, named) for b in schema])
    if isinstance(schema, dict):
        kind = schema["type"]
        if kind == "record":
            fields = {f["name"]: values(f["type"], named) for f in schema["fields"]}
            defaulted = {f["name"] for f in schema["fields"] if "default" in f}
            tag = st.sampled_from([schema["name"]] * 4 + ["ks.N1", "N0"])  # mostly right
            return st.fixed_dictionaries(
                {n: s for n, s in fields.items() if n not in defaulted},
                optional={
                    **{n: s for n, s in fields.items() if n in defaulted},
                    "-type": tag,
                    "extra": JUNK,
                },
            )
        if kind == "array":
            return st.lists(values(schema["items"], named), max_size=2)
        if kind == "map":
            return st.dictionaries(st.sampled_from("pq"), values(schema["values"], named))
        if kind == "enum":
            return st.sampled_from([*schema["symbols"], "z"])
        return _near(kind, named)  # fixed (a string), or a wrapped type
    return {
        "null": st.none(),
        "boolean": st.booleans(),
        "int": st.integers(-3, 3) | BOUNDS,
        "long": st.integers(-3, 3) | BOUNDS,
        "float": st.floats(allow_nan=False) | st.integers(-3, 3),
        "double": st.floats(allow_nan=False) | st.integers(-3, 3),
    }.get(schema, st.text(max_size=2))


def named_types(schema: Any, found: dict[str, Any]) -> dict[str, Any]:
    if isinstance(schema, list):
        for branch in schema:
            named_types(branch, found)
    elif isinstance(schema, dict):
        if "name" in schema:
            found[schema["name"]] = schema
        for child in [f["type"] for f in schema.get("fields", [])] + [
            schema[k] for k in ("items", "values") if k in schema
        ]:
            named_types(child, found)
    return found


@settings(max_examples=400, deadline=None)
@given(data=st.data(), shape=SHAPES)
def test_verdicts_agree_with_fastavro(data: st.DataObject, shape: list) -> None:
    parsed = parse_schema(realise(shape))
    named = named_types(parsed, {})
    for value in data.draw(st.lists(values(parsed, named), min_size=1, max_size=8)):
        expected = validate(value, parsed, raise_errors=False)
        assert (schema_problems(value, parsed) == []) == expected, (parsed, value)


class Reads(dict):
    """A part of a schema that counts how often it is read: the checker's work."""

    count = 0

    def __getitem__(self, key: Any) -> Any:
        Reads.count += 1
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        Reads.count += 1
        return super().get(key, default)


def counted(schema: Any) -> Any:
    if isinstance(schema, list):
        return [counted(b) for b in schema]
    if isinstance(schema, dict):
        return Reads({k: counted(v) for k, v in schema.items()})
    return schema


def reads(event: Any, schema: dict[str, Any]) -> int:
    Reads.count = 0
    schema_problems(event, schema)
    return Reads.count


def levels(n: int) -> dict[str, Any]:
    """Records P{i} and Q{i} for i up to n, each with a field `next` of either record of the
    level below: P{i}'s defines them, Q{i}'s refers to them by name. Expanded, the root would
    hold 2**n records."""
    below = [
        record("P0", [{"name": "leaf", "type": "long"}]),
        record("Q0", [{"name": "leaf", "type": "string"}]),
    ]
    for i in range(1, n + 1):
        below = [
            record(f"P{i}", [{"name": "next", "type": below}]),
            record(f"Q{i}", [{"name": "next", "type": [f"P{i - 1}", f"Q{i - 1}"]}]),
        ]
    return counted(parse_schema(record("Root", [{"name": "next", "type": below}])))


def nested(depth: int, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = {"next": leaf}
    return leaf


def test_the_work_grows_with_the_event_not_with_the_expanded_schema() -> None:
    schema = levels(16)
    schema_problems({}, schema)  # its named types are gathered once
    # Every level of these events fails both of its union's records, and each record's field
    # may be either record below: each level costs the same, not twice the one below it.
    work = [reads(nested(depth, True), schema) for depth in range(2, 17)]  # below the root
    assert len({after - before for before, after in itertools.pairwise(work)}) == 1, work
    # A small event reads as much of a schema of 8 levels as of one of 16.
    small = levels(8)
    schema_problems({}, small)
    assert reads({"next": None}, small) == reads({"next": None}, schema)


def test_a_deep_event_names_its_innermost_field() -> None:
    schema = levels(16)
    assert schema_problems(nested(17, {"leaf": 1}), schema) == []
    assert schema_problems(nested(17, {"leaf": "s"}), schema) == []
    assert schema_problems(nested(17, {"leaf": True}), schema) == [
        {"path": "next." * 17 + "leaf", "message": "expected long, got a boolean"}
    ]


def chain(depth: int, kind: str) -> dict[str, Any]:
    """A record whose field nests `depth` - 1 more levels of `kind`."""
    schema: Any = "long"
    for i in range(depth - 1):
        schema = {
            "array": {"type": "array", "items": schema},
            "map": {"type": "map", "values": schema},
            "union": ["null", schema],
            "record": record(f"R{i}", [{"name": "f", "type": schema}]),
            "attribute": {"nested": schema},  # not a type: only JSON's nesting
        }[kind]
    if kind == "attribute":
        return record("E", [{"name": "f", "type": "long", "doc": schema}])
    return record("E", [{"name": "f", "type": schema}])


@pytest.mark.parametrize("kind", ["array", "map", "union", "record", "attribute"])
def test_deeply_nested_schemas_are_refused_with_a_value_error(kind: str) -> None:
    for depth in (HARD_MAX_SCHEMA_DEPTH + 1, 10_000):
        if kind != "attribute" or depth > 4 * HARD_MAX_SCHEMA_DEPTH:
            with pytest.raises(ValueError, match="nests"):
                parse_schema(chain(depth, kind))
    if kind != "attribute":
        assert schema_depth(parse_schema(chain(HARD_MAX_SCHEMA_DEPTH, kind))) == 64
    with pytest.raises(ValueError, match="nests"):
        schema_limit_problems(chain(10_000, kind), Limits())


def test_named_types_count_as_deep_as_where_they_are_used() -> None:
    # Each record refers to the one before, all defined at the root: the text is flat, but an
    # event can nest as deep as the chain is long.
    fields = [{"name": "r0", "type": record("R0", [{"name": "v", "type": "long"}])}]
    for i in range(1, HARD_MAX_SCHEMA_DEPTH):
        fields.append(
            {"name": f"r{i}", "type": record(f"R{i}", [{"name": "v", "type": f"R{i - 1}"}])}
        )
    with pytest.raises(ValueError, match=f"nests {HARD_MAX_SCHEMA_DEPTH + 1} levels"):
        parse_schema(record("E", fields))
    assert schema_depth(parse_schema(record("E", fields[:-1]))) == HARD_MAX_SCHEMA_DEPTH


def test_a_schema_that_contains_itself_is_refused() -> None:
    schema = record("E", [])
    schema["fields"].append({"name": "f", "type": schema})
    with pytest.raises(ValueError, match="nests"):
        parse_schema(schema)


KEYS = ["type", "name", "fields", "items", "values", "symbols", "size", "default", "namespace"]
WORDS = ["record", "array", "map", "enum", "fixed", "error", "string", "long", "null", "E", "a"]
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2) | st.sampled_from(WORDS),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner),
    max_leaves=20,
)


@settings(max_examples=500, deadline=None)
@given(fields=JSONISH, name=st.sampled_from(["E", "string", 1]))
def test_parse_schema_raises_only_value_errors(fields: Any, name: Any) -> None:
    with contextlib.suppress(ValueError):
        parse_schema({"type": "record", "name": name, "fields": fields})


def test_types_named_as_primitives_and_error_types_are_refused() -> None:
    with pytest.raises(ValueError, match="primitive"):
        parse_schema(record("E", [{"name": "f", "type": record("string", [])}], namespace="ks"))
    with pytest.raises(ValueError, match="protocols"):
        parse_schema(record("E", [{"name": "f", "type": {**record("X", []), "type": "error"}}]))


def test_the_limits_name_their_setting() -> None:
    # Depth 5: the root, an optional (a union) record, an array, a map.
    inner = record(
        "I", [{"name": "m", "type": {"type": "array", "items": {"type": "map", "values": "long"}}}]
    )
    schema = record("E", [{"name": "i", "type": ["null", inner]}], doc="\u00e9" * 100)
    size = len(json.dumps(schema, separators=(",", ":")))
    assert schema_limit_problems(schema, Limits(max_schema_bytes=size, max_schema_depth=5)) == []
    assert schema_limit_problems(schema, Limits(max_schema_bytes=size - 1, max_schema_depth=4)) == [
        {
            "field": "schema",
            "message": f"{size} bytes of JSON; the limit is {size - 1} (max_schema_bytes)",
            "setting": "max_schema_bytes",
            "limit": size - 1,
        },
        {
            "field": "schema",
            "message": "5 levels of records, arrays, maps and unions; the limit is 4 "
            "(max_schema_depth)",
            "setting": "max_schema_depth",
            "limit": 4,
        },
    ]


def test_no_setting_allows_more_nesting_than_the_checks_take() -> None:
    assert Limits(max_schema_depth=HARD_MAX_SCHEMA_DEPTH).max_schema_depth == 64
    with pytest.raises(ValidationError):
        Limits(max_schema_depth=HARD_MAX_SCHEMA_DEPTH + 1)


def test_the_size_the_router_compiles_is_counted_not_expanded() -> None:
    # Each level's records use both records of the level below: 2**n uses, written out.
    assert schema_size(parse_schema(levels(4))) < schema_size(parse_schema(levels(5)))
    big = parse_schema(levels(16))
    assert schema_size(big) > 2**16
    [problem] = [
        p
        for p in schema_limit_problems(levels(16), Limits(max_schema_depth=64))
        if p["setting"] == "max_schema_types"
    ]
    assert problem["limit"] == Limits().max_schema_types


def test_a_check_too_costly_for_its_event_is_refused_within_its_budget() -> None:
    """A union of 300 records over an array of objects: every object is tried against every
    record. The check stops at its budget (steps counted, not timed) and says why."""
    branches = [record(f"R{i}", [{"name": f"a{i}", "type": "long"}]) for i in range(300)]
    schema = parse_schema(
        record("Wide", [{"name": "xs", "type": {"type": "array", "items": branches}}])
    )
    event = {"xs": [{"a299": n} for n in range(1000)]}
    size = len(json.dumps(event))
    assert schema_problems(event, schema) == []  # valid, at 300 steps an object
    [problem] = schema_problems(event, schema, check_budget(size))
    assert problem["path"] == "(event)" and "more than" in problem["message"]
    # An ordinary event is far within its budget.
    assert schema_problems({"xs": [{"a0": 1}]}, schema, check_budget(12)) == []


def test_a_wide_record_costs_what_the_event_holds_not_what_the_record_could() -> None:
    """Forty optional fields, each object giving one: ordinary, and well within the budget
    however many objects there are (the fields not given are judged once per record)."""
    fields = [{"name": f"f{i}", "type": ["null", "string"]} for i in range(40)]
    schema = parse_schema(
        record("Wide", [{"name": "items", "type": {"type": "array", "items": record("I", fields)}}])
    )
    event = {"items": [{"f0": f"x{n}"} for n in range(3000)]}
    assert schema_problems(event, schema, check_budget(len(json.dumps(event)))) == []
