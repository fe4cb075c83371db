"""Optional Avro schemas of streams (fastavro parses them): parsed once, and the problems of a
record listed by field path (`user.id`), for the proxy's 422 and the router's dead letters.

The rules are fastavro's `validate` for JSON-decoded values (and `router.avro` compiles the
same to Spark): a missing field counts as null unless it has a default; int and long take
integers in range (a boolean is not one), float and double any number; bytes and fixed take
nothing JSON can carry; an enum takes one of its symbols; extra fields are allowed; a union
takes what any of its branches takes; logical types are their underlying type. Deliberately
unlike fastavro:
- a missing field with a default is always fine (fastavro checks the default itself, and so
  refuses a missing bytes or fixed field whose default is, as Avro writes it, a string);
- a record's `-type` key must be the record's name as parsed (fastavro compares a nested record
  of a schema without namespace to a name of its own making);
- a `date` is an int only (fastavro also takes an ISO date string, and raises on other strings).

A tenant's schema is checked against every event of theirs on the shared proxy, so the check is
polynomial by construction: named types are looked up, never expanded, and each pair of a part
of the event and a part of the schema is judged at most once, so a union's branches and a type
referred to many times cost no more than the event's size times the schema's.
"""

from __future__ import annotations

import json
from typing import Any

from fastavro import parse_schema as _parse

from keystone.contracts.limits import Limits

# How deeply a schema may nest records, arrays, maps and unions, however few its limits: every
# reader recurses once per level (this module, the router's compiler, Spark's optimizer). The
# highest `Limits.max_schema_depth` allows.
HARD_MAX_SCHEMA_DEPTH = 64
# Checked before fastavro parses a schema, as it recurses in C, and overflows the stack (a
# crash, not an exception) on a schema nested some 100,000 deep. Written out, one level of a
# schema nests at most three JSON containers (a record's fields, a field, its type), its
# defaults no deeper than its types.
_HARD_MAX_JSON_DEPTH = 4 * HARD_MAX_SCHEMA_DEPTH
_INT = (-(2**31), 2**31 - 1)
_LONG = (-(2**63), 2**63 - 1)
_PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
# What a wrapped type (`{"type": "long", "logicalType": ...}`) is not: a type of its own.
_COMPLEX = ("record", "enum", "fixed", "array", "map")
_JSON_TYPE = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    type(None): "null",
}


def parse_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A parsed Avro record schema; ValueError saying why when it is not one (and never another
    exception, whatever the dict)."""
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise ValueError("an event schema is an Avro record: {'type': 'record', 'fields': [...]}")
    if _nests_deeper(schema, _HARD_MAX_JSON_DEPTH):
        raise ValueError(f"the schema's JSON nests more than {_HARD_MAX_JSON_DEPTH} deep")
    try:
        parsed = _parse(schema, _write_hint=False)
    except Exception as e:  # fastavro raises several types for a malformed schema
        raise ValueError(f"not a valid Avro schema: {e}") from e
    depth = schema_depth(parsed)
    if depth > HARD_MAX_SCHEMA_DEPTH:
        raise ValueError(
            f"the schema nests {depth} levels deep (records, arrays, maps and unions, named "
            f"types counted where they are used); at most {HARD_MAX_SCHEMA_DEPTH}"
        )
    return parsed


def schema_limit_problems(schema: dict[str, Any], limits: Limits) -> list[dict[str, str | int]]:
    """The problems, as control reports them ({field, message, setting, limit}), of a stream's
    schema over the limits: its JSON text's bytes and its nesting. ValueError when it is not a
    schema at all (the spec's own validation says why)."""
    parsed = parse_schema(schema)  # also bounds its nesting, for json.dumps
    # Non-ASCII escaped, so characters count as bytes; `str` for what YAML reads as a date.
    size = len(json.dumps(schema, separators=(",", ":"), default=str))
    measures = [
        ("max_schema_bytes", size, "bytes of JSON"),
        ("max_schema_depth", schema_depth(parsed), "levels of records, arrays, maps and unions"),
        ("max_schema_types", schema_size(parsed), "types, each named type counted where used"),
    ]
    problems: list[dict[str, str | int]] = []
    for setting, value, what in measures:
        limit = getattr(limits, setting)
        if value > limit:
            message = f"{value} {what}; the limit is {limit} ({setting})"
            problems.append(
                {"field": "schema", "message": message, "setting": setting, "limit": limit}
            )
    return problems


def schema_depth(parsed: dict[str, Any]) -> int:
    """How deeply a parsed schema nests records, arrays, maps and unions (the root record is 1),
    a named type counted as deep where it is used as where it is defined: as deep as an event
    can nest. ValueError for a type that Keystone's checks cannot judge."""
    return _measure(parsed, {}, frozenset())[0]


def schema_size(parsed: dict[str, Any]) -> int:
    """How many types the schema holds with each named type counted whole where it is used: the
    size of the router's compiled check (`router.avro`), which writes every use out. Counted,
    never expanded: a schema whose records each use the one before twice is 2^levels big."""
    return _measure(parsed, {}, frozenset())[1]


def _measure(
    schema: Any, measured: dict[str, tuple[int, int]], enclosing: frozenset[str]
) -> tuple[int, int]:
    """(depth, size) of a type. fastavro accepts a name only after its definition, so a
    reference finds the named type's measures in `measured`, unless it is to an enclosing
    record."""
    if isinstance(schema, str):
        if schema in enclosing:
            raise ValueError("recursive types (a record that contains itself) are not supported")
        return measured.get(schema, (0, 1))
    if isinstance(schema, list):
        branches = [_measure(b, measured, enclosing) for b in schema]
        return 1 + max((d for d, _ in branches), default=0), 1 + sum(n for _, n in branches)
    kind = schema["type"]
    if kind in ("array", "map"):
        depth, size = _measure(
            schema["items" if kind == "array" else "values"], measured, enclosing
        )
        return 1 + depth, 1 + size
    if kind not in ("record", "enum", "fixed"):
        if kind == "error":  # fastavro's checks take it for a record, the router's for nothing
            raise ValueError("'error' is a type of Avro protocols, not of schemas")
        return _measure(kind, measured, enclosing)  # a wrapped type: {"type": "long", ...}
    name = schema["name"]
    if name.rsplit(".", 1)[-1] in _PRIMITIVES:  # the router would take `string` for this type
        raise ValueError(f"a named type may not be called as a primitive type is: {name!r}")
    depth, size = 0, 1  # enum, fixed
    if kind == "record":
        inner = enclosing | {name}
        fields = [_measure(f["type"], measured, inner) for f in schema["fields"]]
        depth = 1 + max((d for d, _ in fields), default=0)
        size = 1 + sum(n for _, n in fields)
    measured[name] = (depth, size)
    return depth, size


def _nests_deeper(value: Any, limit: int) -> bool:
    """Whether `value` nests dicts and lists more than `limit` deep: walked without recursion,
    as a hostile schema may nest far beyond Python's recursion limit."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth > limit:
                return True
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
    return False


# The work one event's check may take, in steps (a value judged against a type): four per byte
# of the event's JSON, ten thousand at least. A schema of ordinary width takes about one per
# byte; a union of hundreds of records over an array of thousands of objects would take hundreds,
# in a thread that shares its process with every other tenant.
STEPS_PER_BYTE = 4
MIN_STEPS = 10_000
# Verdicts kept per check, at most: beyond them the budget still bounds the work.
MAX_VERDICTS = 100_000


def check_budget(event_bytes: int) -> int:
    """The steps a check of an event of this many bytes may take."""
    return max(MIN_STEPS, STEPS_PER_BYTE * event_bytes)


class _TooCostly(Exception):
    pass


def schema_problems(
    event: Any, parsed: dict[str, Any], budget: int | None = None
) -> list[dict[str, str]]:
    """[] when the event matches; else [{path, message}] for each mismatching field. With a
    `budget` (`check_budget`), an event whose check would take more steps is refused as a
    whole, with a message that says so."""
    problems: list[dict[str, str]] = []
    try:
        _Checker(_named_types(parsed), budget).problems(event, parsed, "", problems)
    except _TooCostly:
        return [
            {
                "path": "(event)",
                "message": f"checking it against the stream's schema takes more than {budget} "
                f"steps ({STEPS_PER_BYTE} per byte of the event): the schema's unions are too "
                "wide for an event this large",
            }
        ]
    return problems


# Every event of a post is checked against the same parsed schema: its named types are gathered
# once per schema, not once per event. An entry keeps its schema alive, so that no other takes
# its id while it is here.
_named_cache: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
_NAMED_CACHE_SIZE = 256


def _named_types(parsed: dict[str, Any]) -> dict[str, Any]:
    cached = _named_cache.get(id(parsed))
    if cached is not None and cached[0] is parsed:
        return cached[1]
    named: dict[str, Any] = {}
    _collect_named(parsed, named)
    if len(_named_cache) >= _NAMED_CACHE_SIZE:
        _named_cache.clear()  # one step, safe among threads
    _named_cache[id(parsed)] = (parsed, named)
    return named


def _collect_named(schema: Any, named: dict[str, Any]) -> None:
    if isinstance(schema, list):
        for branch in schema:
            _collect_named(branch, named)
    elif isinstance(schema, dict):
        if schema.get("type") in ("record", "enum", "fixed"):
            named[schema["name"]] = schema
        for field in schema.get("fields", []):
            _collect_named(field["type"], named)
        for key in ("items", "values"):
            if key in schema:
                _collect_named(schema[key], named)


class _Checker:
    """One event against one parsed schema. The walks follow the event only as deep as the
    schema goes, which `parse_schema` bounds."""

    def __init__(self, named: dict[str, Any], budget: int | None) -> None:
        self.named = named
        self.steps_left = budget
        self.shapes: dict[int, tuple[dict[str, Any], set[str]]] = {}
        # Verdicts on (an object or array of the event, a part of the schema), by identity:
        # union branches and types used in many places would otherwise judge them again and
        # again, exponentially often in how deeply they nest.
        self.verdicts: dict[tuple[int, int], bool] = {}

    def shape(self, record: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
        """A record's field types by name, and the names of those that must be present (no
        default, and a type null does not match): once per record per check."""
        known = self.shapes.get(id(record))
        if known is None:
            fields = {f["name"]: f["type"] for f in record["fields"]}
            required = {
                f["name"]
                for f in record["fields"]
                if "default" not in f and not self.accepts_null(f["type"])
            }
            known = self.shapes[id(record)] = (fields, required)
        return known

    def accepts_null(self, schema: Any) -> bool:
        schema = self.resolve(schema)
        if isinstance(schema, list):
            return any(self.accepts_null(b) for b in schema)
        return schema == "null"

    def resolve(self, schema: Any) -> Any:
        """A named reference or a wrapped type as the schema it stands for."""
        while True:
            if isinstance(schema, dict) and schema["type"] not in _COMPLEX:
                schema = schema["type"]
            elif isinstance(schema, str) and schema in self.named:
                schema = self.named[schema]
            else:
                return schema

    def valid(self, value: Any, schema: Any) -> bool:
        if self.steps_left is not None:
            self.steps_left -= 1
            if self.steps_left < 0:
                raise _TooCostly
        schema = self.resolve(schema)
        if not isinstance(value, dict | list):
            return self.judge(value, schema)
        key = (id(value), id(schema))
        verdict = self.verdicts.get(key)
        if verdict is None:
            verdict = self.judge(value, schema)
            if len(self.verdicts) < MAX_VERDICTS:
                self.verdicts[key] = verdict
        return verdict

    def judge(self, value: Any, schema: Any) -> bool:
        if isinstance(schema, list):
            return any(self.valid(value, branch) for branch in schema)
        if isinstance(schema, str):
            return _primitive(value, schema)
        kind = schema["type"]
        if kind == "record":
            if not isinstance(value, dict) or value.get("-type", schema["name"]) != schema["name"]:
                return False
            fields, required = self.shape(schema)
            # A missing field is null to its type: the record's fields that cannot be null,
            # found once, must all be there. Work per object grows with its keys, not with the
            # record's width.
            return required <= value.keys() and all(
                self.valid(item, fields[key]) for key, item in value.items() if key in fields
            )
        if kind == "enum":
            return isinstance(value, str) and value in schema["symbols"]
        if kind == "array":
            return isinstance(value, list) and all(self.valid(v, schema["items"]) for v in value)
        if kind == "map":
            return isinstance(value, dict) and all(
                self.valid(v, schema["values"]) for v in value.values()
            )
        return False  # fixed: bytes, which JSON has not

    def problems(self, value: Any, schema: Any, path: str, problems: list) -> None:
        """Appends why `value` does not match `schema`: inside records, field by field."""
        resolved = self.resolve(schema)
        if isinstance(resolved, dict) and resolved["type"] == "record":
            if not isinstance(value, dict):
                problems.append(_problem(path, value, "an object"))
            elif value.get("-type", resolved["name"]) != resolved["name"]:
                tag = value["-type"]
                named = json.dumps(tag) if isinstance(tag, str) else _JSON_TYPE[type(tag)]
                problems.append(
                    {
                        "path": path or "(event)",
                        "message": f"expected {resolved['name']}, got an object whose '-type' "
                        f"is {named}",
                    }
                )
            else:
                for field in _given(value, resolved):
                    inner = f"{path}.{field['name']}" if path else field["name"]
                    self.problems(value.get(field["name"]), field["type"], inner, problems)
        elif self.valid(value, resolved):
            return
        elif isinstance(resolved, list) and (record := self.meant(value, resolved)) is not None:
            self.problems(value, record, path, problems)
        else:
            problems.append(_problem(path, value, _describe(resolved)))

    def meant(self, value: Any, union: list) -> dict[str, Any] | None:
        """The record branch of a union that an object not matching it most likely meant: the
        one its `-type` names, else the one with most of its keys as fields (the first if
        tied); None when the value is not an object or no record can be meant."""
        if not isinstance(value, dict):
            return None
        records = [self.resolve(b) for b in union]
        records = [r for r in records if isinstance(r, dict) and r["type"] == "record"]
        if "-type" in value:
            records = [r for r in records if r["name"] == value["-type"]]
        return max(
            records,
            key=lambda r: sum(f["name"] in value for f in r["fields"]),
            default=None,
        )


def _given(record: dict[str, Any], schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The fields of `schema` to check in `record`: a missing one with a default is fine."""
    return [f for f in schema["fields"] if f["name"] in record or "default" not in f]


def _primitive(value: Any, name: str) -> bool:
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name in ("int", "long"):
        low, high = _INT if name == "int" else _LONG
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    if name in ("float", "double"):
        return isinstance(value, int | float) and not isinstance(value, bool)
    return False  # bytes, which JSON has not


def _describe(schema: Any) -> str:
    if isinstance(schema, list):
        return " or ".join(_describe(b) for b in schema)
    if isinstance(schema, dict):
        if schema.get("type") == "array":
            return f"an array of {_describe(schema['items'])}"
        if schema.get("type") == "map":
            return f"a map of {_describe(schema['values'])}"
        return schema.get("name", schema.get("type", "a value"))
    return schema


def _problem(path: str, value: Any, expected: str) -> dict[str, str]:
    got = _JSON_TYPE.get(type(value), type(value).__name__)
    return {"path": path or "(event)", "message": f"expected {expected}, got {got}"}
