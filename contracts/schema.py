"""Optional Avro schemas of streams (fastavro): parsed once, and the problems of a record
listed by field path (`user.id`), for the proxy's 422 and the router's dead letters."""

from __future__ import annotations

from typing import Any

from fastavro import parse_schema as _parse
from fastavro.validation import validate

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
    """A parsed Avro record schema; ValueError saying why when it is not one."""
    if schema.get("type") != "record":
        raise ValueError("an event schema is an Avro record: {'type': 'record', 'fields': [...]}")
    try:
        parsed = _parse(schema, _write_hint=False)
    except Exception as e:  # fastavro raises several types for a malformed schema
        raise ValueError(f"not a valid Avro schema: {e}") from e
    if _recursive(parsed, set()):
        raise ValueError("recursive types (a record that contains itself) are not supported")
    return parsed


def _recursive(schema: Any, enclosing: set[str]) -> bool:
    """True when a record refers to itself (or an enclosing record) by name."""
    if isinstance(schema, str):
        return schema in enclosing
    if isinstance(schema, list):
        return any(_recursive(b, enclosing) for b in schema)
    if isinstance(schema, dict):
        inner = enclosing | {schema["name"]} if schema.get("type") == "record" else enclosing
        children = [f["type"] for f in schema.get("fields", [])]
        children += [schema[k] for k in ("items", "values") if k in schema]
        return any(_recursive(c, inner) for c in children)
    return False


def schema_problems(event: Any, parsed: dict[str, Any]) -> list[dict[str, str]]:
    """[] when the event matches; else [{path, message}] for each mismatching field."""
    named: dict[str, Any] = {}
    _collect_named(parsed, named)
    problems: list[dict[str, str]] = []
    _check(event, parsed, "", named, problems)
    return problems


def _collect_named(schema: Any, named: dict[str, Any]) -> None:
    if isinstance(schema, list):
        for branch in schema:
            _collect_named(branch, named)
    elif isinstance(schema, dict):
        if "name" in schema and schema.get("type") in ("record", "enum", "fixed"):
            named[schema["name"]] = schema
        for field in schema.get("fields", []):
            _collect_named(field["type"], named)
        for key in ("items", "values"):
            if key in schema:
                _collect_named(schema[key], named)


def _check(value: Any, schema: Any, path: str, named: dict, problems: list) -> None:
    schema = named.get(schema, schema) if isinstance(schema, str) else schema
    if isinstance(schema, dict) and schema.get("type") == "record":
        if not isinstance(value, dict):
            problems.append(_problem(path, value, "an object"))
            return
        for field in schema["fields"]:
            name = field["name"]
            if name not in value and "default" in field:
                continue
            _check(
                value.get(name), field["type"], f"{path}.{name}" if path else name, named, problems
            )
        return
    if isinstance(schema, list) and isinstance(value, dict):
        records = [named.get(b, b) for b in schema]
        records = [b for b in records if isinstance(b, dict) and b.get("type") == "record"]
        if len(records) == 1:  # the object can only mean the union's one record branch
            _check(value, records[0], path, named, problems)
            return
    if not validate(value, _expand(schema, named), raise_errors=False):
        problems.append(_problem(path, value, _describe(schema)))


def _expand(schema: Any, named: dict) -> Any:
    """The schema with every named reference replaced by its definition, however deep, so
    fastavro can judge a part of it on its own."""
    if isinstance(schema, str):
        return _expand(named[schema], named) if schema in named else schema
    if isinstance(schema, list):
        return [_expand(b, named) for b in schema]
    if isinstance(schema, dict):
        expanded = dict(schema)
        if "fields" in schema:
            expanded["fields"] = [
                {**f, "type": _expand(f["type"], named)} for f in schema["fields"]
            ]
        for key in ("items", "values"):
            if key in schema:
                expanded[key] = _expand(schema[key], named)
        return expanded
    return schema


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
