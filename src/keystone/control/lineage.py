"""Field lineage: which outputs read which of a stream's fields, beside what its Avro schema
declares; and the check that a schema change leaves every field an output reads where it was.

A field is a dotted path into the payload, as the language reads it (`paths_read`): through
records only. An output reads a field in its filter, its projection, or both. A `*` projection
passes the payload on whatever it holds, so it reads no field by name (the paths it leaves out
with `except` are not read either). The schema's fields are its records' fields, nested records
flattened to dotted paths; a field's type is the set of its non-null types (a union with null is
optional, which is no change to a reader: a null is what every function and comparison takes).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from keystone.contracts.errors import Conflict
from keystone.contracts.schema import parse_schema
from keystone.contracts.spec import OutputSpec, StreamSpec
from keystone.router.lang.ast import dotted, paths_read
from keystone.router.lang.parser import parse_filter, parse_projection

Where = Literal["filter", "projection"]


@dataclass(frozen=True)
class Declared:
    """A schema field's type: its non-null types (named ones by name), and whether it may be
    null."""

    types: tuple[str, ...]
    nullable: bool

    def __str__(self) -> str:
        text = " | ".join(self.types)
        return f"{text} | null" if self.nullable else text


@dataclass
class FieldUse:
    field: str
    declared: Declared | None  # None: the schema does not declare it (or there is none)
    readers: dict[str, list[Where]] = field(default_factory=dict)  # output -> where


@dataclass
class Lineage:
    fields: list[FieldUse]  # read by some output, or declared by the schema
    whole: list[str]  # outputs whose projection is `*`
    has_schema: bool

    @property
    def unread(self) -> list[str]:
        """Fields the schema declares and no output reads by name."""
        return [f.field for f in self.fields if f.declared is not None and not f.readers]

    @property
    def undeclared(self) -> list[str]:
        """Fields outputs read that the schema does not declare (none without a schema)."""
        if not self.has_schema:
            return []
        return [f.field for f in self.fields if f.declared is None and f.readers]

    def warnings(self) -> list[str]:
        undeclared = set(self.undeclared)
        return [
            f"output {', '.join(sorted(use.readers))} read{'s' * (len(use.readers) == 1)} "
            f"{use.field}, which the stream's schema does not declare: it is always missing "
            "from events the proxy accepts, unless the schema allows more fields"
            for use in self.fields
            if use.field in undeclared
        ]


def reads(output: OutputSpec) -> dict[str, list[Where]]:
    """The fields an output reads, and where."""
    found: dict[str, list[Where]] = {}
    parts: list[tuple[Where, Any]] = [("projection", parse_projection(output.projection))]
    if output.filter:
        parts.insert(0, ("filter", parse_filter(output.filter)))
    for where, node in parts:
        for path in sorted(paths_read(node)):
            found.setdefault(dotted(path), []).append(where)
    return found


def shadow_reader(output: str) -> str:
    """How a running shadow of `output` is named among a field's readers."""
    return f"{output} (shadow)"


def lineage(spec: StreamSpec, shadows: Iterable[OutputSpec] = ()) -> Lineage:
    """`shadows`: the versions of the outputs' running shadows (`contracts.shadows`), which
    read the stream's fields too."""
    declared = schema_fields(spec.avro_schema) if spec.avro_schema else {}
    uses = {name: FieldUse(name, kind) for name, kind in declared.items()}
    readers = [(o.name, o) for o in spec.outputs] + [(shadow_reader(o.name), o) for o in shadows]
    for reader, output in readers:
        for name, where in reads(output).items():
            if name not in uses:
                uses[name] = FieldUse(name, declared_at(declared, name))
            uses[name].readers[reader] = where
    whole = [r for r, o in readers if parse_projection(o.projection).whole]
    fields = sorted(uses.values(), key=lambda u: u.field)
    return Lineage(fields, whole, spec.avro_schema is not None)


def schema_fields(schema: dict[str, Any]) -> dict[str, Declared]:
    """Every field of the schema's records, nested records' fields as dotted paths."""
    parsed = parse_schema(schema)
    return dict(_fields(parsed, "", {}))


def declared_at(fields: dict[str, Declared], path: str) -> Declared | None:
    """What the schema declares at a path: its field, or, below a map's field, the map's values
    (any key may be there or not)."""
    if path in fields:
        return fields[path]
    steps = path.split(".")
    for cut in range(len(steps) - 1, 0, -1):
        above = fields.get(".".join(steps[:cut]))
        if above is not None:
            maps = [t for t in above.types if t.startswith("map of ")]
            if not maps:
                return None  # below a record (whose fields are listed) or a scalar: not there
            return Declared(tuple(t.removeprefix("map of ") for t in maps), True)
    return None


def _fields(schema: Any, prefix: str, named: dict[str, Any]) -> Iterator[tuple[str, Declared]]:
    """The fields of a record schema (a type named again is the one defined first; a schema
    cannot hold itself: `parse_schema` refuses recursive types)."""
    if not (isinstance(schema, dict) and schema.get("type") == "record"):
        return
    _name(schema, named)
    for member in schema.get("fields", []):
        path = f"{prefix}{member['name']}"
        branches = member["type"] if isinstance(member["type"], list) else [member["type"]]
        for branch in branches:
            _name(branch, named)
        resolved = [named.get(b, b) if isinstance(b, str) else b for b in branches]
        types = tuple(_type_name(b, named) for b in resolved if _type_name(b, named) != "null")
        yield path, Declared(types, len(types) < len(resolved))
        for branch in resolved:
            yield from _fields(branch, f"{path}.", named)


def _name(schema: Any, named: dict[str, Any]) -> None:
    """Registers a named type (record, enum, fixed) by its name and its full name."""
    if isinstance(schema, dict) and schema.get("type") in ("record", "enum", "fixed"):
        name = schema.get("name", "")
        named.setdefault(name, schema)
        if schema.get("namespace") and "." not in name:
            named.setdefault(f"{schema['namespace']}.{name}", schema)


def _type_name(schema: Any, named: dict[str, Any]) -> str:
    """A type as the check compares it: named types by kind and name, an enum with its symbols,
    a logical type after its type (`long (timestamp-millis)`)."""
    if isinstance(schema, str):
        return _type_name(named[schema], named) if schema in named else schema
    if isinstance(schema, dict):
        kind = schema.get("type")
        logical = f" ({schema['logicalType']})" if schema.get("logicalType") else ""
        if kind == "enum":
            return f"enum {schema.get('name', '')} {{{', '.join(schema.get('symbols', []))}}}"
        if kind in ("record", "fixed"):
            return f"{kind} {schema.get('name', '')}{logical}".strip()
        if kind == "array":
            return f"array of {_type_name(schema.get('items'), named)}"
        if kind == "map":
            return f"map of {_type_name(schema.get('values'), named)}"
        return f"{_type_name(kind, named)}{logical}"
    return "union"


def _still(was: Declared, now: Declared | None) -> bool:
    """Whether a field that was `was` still takes every value it took: each of its types is
    still one of its types (an enum with more symbols counting as the same). More types (a
    union widened: `long` to `long | string`) break no reader: every event it read before
    still comes as it did, and a value of a type a function does not take gives null, never a
    failure."""
    if now is None:
        return False
    return all(any(_same(old, new) for new in now.types) for old in was.types)


def _same(old: str, new: str) -> bool:
    if old == new:
        return True
    if old.startswith("enum ") and new.startswith("enum "):
        old_name, old_symbols = old[5:].split(" {", 1)
        new_name, new_symbols = new[5:].split(" {", 1)
        symbols = {s.strip() for s in old_symbols.rstrip("}").split(",")}
        return old_name == new_name and symbols <= {
            s.strip() for s in new_symbols.rstrip("}").split(",")
        }
    return False


def breaking_changes(old: StreamSpec, new: StreamSpec) -> list[dict[str, str | None]]:
    """What a change of the schema (old's to new's) breaks for the new spec's outputs: each
    field an output reads (or, for a record or map it reads whole, each field within it) that
    the old schema declared and the new one removes (`now` None) or takes a type from. A
    schema taken away removes every field: a later schema must not come in by that way round."""
    if not old.avro_schema or old.avro_schema == new.avro_schema:
        return []
    before = schema_fields(old.avro_schema)
    after = schema_fields(new.avro_schema) if new.avro_schema else {}
    problems: list[dict[str, str | None]] = []
    for output in new.outputs:
        for name in reads(output):
            below = sorted(f for f in before if f.startswith(f"{name}."))
            for path in [name, *below]:
                was = declared_at(before, path)
                now = declared_at(after, path)
                if was is None or _still(was, now):
                    continue  # never declared (nothing to rely on), or read as before
                problems.append(
                    {
                        "output": output.name,
                        "field": path,
                        "was": " | ".join(was.types),
                        "now": None if now is None else " | ".join(now.types),
                    }
                )
    return problems


def check_schema_change(old: StreamSpec | None, new: StreamSpec, force: bool) -> None:
    """Refuses (409) a schema change that breaks what an output reads, unless `force`."""
    if old is None or force:
        return
    problems = breaking_changes(old, new)
    if problems:
        said = "; ".join(
            f"output {p['output']} reads {p['field']}, which it "
            + (
                f"removes (it was {p['was']})"
                if p["now"] is None
                else f"changes from {p['was']} to {p['now']}"
            )
            for p in problems
        )
        raise Conflict(
            f"the new schema breaks what outputs read: {said}. Change those outputs first, or "
            "apply the schema with force",
            problems=problems,
        )
