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

from collections.abc import Iterator
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
        return [
            f"output {', '.join(sorted(use.readers))} read{'s' * (len(use.readers) == 1)} "
            f"{use.field}, which the stream's schema does not declare: it is always missing "
            "from events the proxy accepts, unless the schema allows more fields"
            for use in self.fields
            if use.field in self.undeclared
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


def lineage(spec: StreamSpec) -> Lineage:
    declared = schema_fields(spec.avro_schema) if spec.avro_schema else {}
    uses = {name: FieldUse(name, kind) for name, kind in declared.items()}
    for output in spec.outputs:
        for name, where in reads(output).items():
            uses.setdefault(name, FieldUse(name, declared.get(name))).readers[output.name] = where
    whole = [o.name for o in spec.outputs if parse_projection(o.projection).whole]
    fields = sorted(uses.values(), key=lambda u: u.field)
    return Lineage(fields, whole, spec.avro_schema is not None)


def schema_fields(schema: dict[str, Any]) -> dict[str, Declared]:
    """Every field of the schema's records, nested records' fields as dotted paths."""
    parsed = parse_schema(schema)
    return dict(_fields(parsed, "", {}))


def _fields(schema: Any, prefix: str, named: dict[str, Any]) -> Iterator[tuple[str, Declared]]:
    """The fields of a record schema (a type named again is the one defined first; a schema
    cannot hold itself: `parse_schema` refuses recursive types)."""
    if not (isinstance(schema, dict) and schema.get("type") == "record"):
        return
    named[schema.get("name", "")] = schema
    for member in schema.get("fields", []):
        path = f"{prefix}{member['name']}"
        branches = member["type"] if isinstance(member["type"], list) else [member["type"]]
        resolved = [named.get(b, b) if isinstance(b, str) else b for b in branches]
        types = tuple(_type_name(b) for b in resolved if _type_name(b) != "null")
        yield path, Declared(types, len(types) < len(resolved))
        for branch in resolved:
            yield from _fields(branch, f"{path}.", named)


def _type_name(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "enum", "fixed"):
            return f"{kind} {schema.get('name', '')}".strip()
        if kind == "array":
            return f"array of {_type_name(schema.get('items'))}"
        if kind == "map":
            return f"map of {_type_name(schema.get('values'))}"
        return str(kind)
    return "union"


def breaking_changes(old: StreamSpec, new: StreamSpec) -> list[dict[str, str | None]]:
    """What a change of the schema (old's to new's) breaks for the new spec's outputs: each
    field an output reads that the old schema declared and the new one removes (`now` None),
    or gives other types."""
    if not old.avro_schema or not new.avro_schema or old.avro_schema == new.avro_schema:
        return []
    before, after = schema_fields(old.avro_schema), schema_fields(new.avro_schema)
    problems: list[dict[str, str | None]] = []
    for output in new.outputs:
        for name in reads(output):
            was, now = before.get(name), after.get(name)
            if was is None or (now is not None and set(now.types) == set(was.types)):
                continue  # never declared (nothing to rely on), or the same types
            problems.append(
                {
                    "output": output.name,
                    "field": name,
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
