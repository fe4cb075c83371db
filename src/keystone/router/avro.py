"""A stream's Avro schema checked in Spark: the reason an event does not match, or null.

The proxy refuses such events with a 422 (`contracts.schema`, fastavro); events that reach the
fronting topic another way (a direct producer, a mirror) are checked here with the same rules,
compiled to Column expressions over the event parsed as one VARIANT, and dead-lettered with the
first field path that fails. The rules are fastavro's for JSON-decoded values: a missing field
counts as null unless the field has a default; int and long take integers in range, float and
double any number; bytes and fixed can never match JSON; extra fields are allowed.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

INT32 = (-(2**31), 2**31 - 1)
COMPLEX = ("record", "enum", "fixed", "array", "map")


class _Compiler:
    def __init__(self, schema: dict[str, Any]) -> None:
        self.named: dict[str, Any] = {}
        self._collect(schema)

    def _collect(self, schema: Any) -> None:
        if isinstance(schema, list):
            for branch in schema:
                self._collect(branch)
        elif isinstance(schema, dict):
            if schema.get("type") in ("record", "enum", "fixed") and "name" in schema:
                self.named[schema["name"]] = schema
                self.named[schema["name"].rsplit(".", 1)[-1]] = schema
            for field in schema.get("fields", []):
                self._collect(field["type"])
            for key in ("items", "values"):
                if key in schema:
                    self._collect(schema[key])

    def resolve(self, schema: Any) -> Any:
        """A named reference or a wrapped type (`{"type": "long", "logicalType": ...}`) as
        the schema it stands for."""
        while True:
            if isinstance(schema, str) and schema in self.named:
                schema = self.named[schema]
            elif isinstance(schema, dict) and schema.get("type") not in COMPLEX:
                schema = schema["type"]
            else:
                return schema

    def valid(self, value: Column, schema: Any) -> Column:
        """True when the variant `value` (SQL null when missing) matches `schema`."""
        return F.coalesce(self._valid(value, self.resolve(schema)), F.lit(False))

    def _valid(self, value: Column, schema: Any) -> Column:
        kind = F.schema_of_variant(value)
        absent = value.isNull() | (kind == "VOID")
        if isinstance(schema, list):
            result = F.lit(False)
            for branch in schema:
                result = result | self.valid(value, branch)
            return result
        if isinstance(schema, str):
            return self._primitive(value, kind, absent, schema)
        kind_of = schema["type"]
        if kind_of == "record":
            return self._is_record(value, schema) & _all(
                [self._field(value, f) for f in schema["fields"]]
            )
        if kind_of == "enum":
            text = F.try_variant_get(value, "$", "string")
            return (kind == "STRING") & text.isin(*schema["symbols"])
        if kind_of == "array":
            items = F.try_variant_get(value, "$", "array<variant>")
            every = F.forall(items, lambda item: self.valid(item, schema["items"]))
            return kind.startswith("ARRAY") & F.coalesce(every, F.lit(False))
        if kind_of == "map":
            entries = F.try_variant_get(value, "$", "map<string,variant>")
            every = F.forall(F.map_values(entries), lambda v: self.valid(v, schema["values"]))
            return kind.startswith("OBJECT") & F.coalesce(every, F.lit(False))
        return F.lit(False)  # fixed: bytes, which JSON has not

    @staticmethod
    def _is_record(value: Column, schema: dict[str, Any]) -> Column:
        # fastavro reads a "-type" key as the record's name, and refuses any other name.
        named = F.variant_get(value, "$['-type']", "variant")
        same = F.try_variant_get(named, "$", "string") == schema["name"]
        is_object = F.schema_of_variant(value).startswith("OBJECT")
        return F.coalesce(is_object & (named.isNull() | same), F.lit(False))

    def _field(self, record: Column, field: dict[str, Any]) -> Column:
        value = F.variant_get(record, f"$.{field['name']}", "variant")
        ok = self.valid(value, field["type"])
        if "default" in field:
            ok = value.isNull() | ok
        return ok

    @staticmethod
    def _primitive(value: Column, kind: Column, absent: Column, name: str) -> Column:
        if name == "null":
            return absent
        if name == "boolean":
            return F.coalesce(kind == "BOOLEAN", F.lit(False))
        if name == "string":
            return F.coalesce(kind == "STRING", F.lit(False))
        if name in ("int", "long"):
            low, high = INT32 if name == "int" else (-(2**63), 2**63 - 1)
            number = F.try_variant_get(value, "$", "long")
            integral = kind == "BIGINT"
            return F.coalesce(integral & number.between(low, high), F.lit(False))
        if name in ("float", "double"):
            number = (kind == "BIGINT") | kind.startswith("DECIMAL") | (kind == "DOUBLE")
            return F.coalesce(number, F.lit(False))
        return F.lit(False)  # bytes

    def problem(self, payload: Column, schema: dict[str, Any]) -> Column:
        """The first field path that fails, as a dead-letter reason; null when it matches."""
        reason = None
        for path, ok in self._paths(payload, schema, ""):
            message = F.lit(f"does not match the stream's schema at {path or '(event)'}")
            reason = F.when(~ok, message) if reason is None else reason.when(~ok, message)
        return reason if reason is not None else F.lit(None).cast("string")

    def _paths(self, value: Column, schema: Any, path: str) -> list[tuple[str, Column]]:
        """(path, valid) pairs, outer before inner, descending into records so that the
        reason names the deepest field at fault."""
        schema = self.resolve(schema)
        if not (isinstance(schema, dict) and schema.get("type") == "record"):
            return [(path, self.valid(value, schema))]
        pairs = [(path, self._is_record(value, schema))]
        for field in schema["fields"]:
            child = F.variant_get(value, f"$.{field['name']}", "variant")
            inner = f"{path}.{field['name']}" if path else field["name"]
            field_schema = self.resolve(field["type"])
            if isinstance(field_schema, dict) and field_schema.get("type") == "record":
                if "default" in field:
                    pairs.append((inner, self._field(value, field)))
                else:
                    pairs += self._paths(child, field_schema, inner)
            else:
                pairs.append((inner, self._field(value, field)))
        return pairs


def _all(checks: list[Column]) -> Column:
    result = F.lit(True)
    for check in checks:
        result = result & check
    return result


def schema_problem(payload: Column, schema: dict[str, Any]) -> Column:
    """The reason the VARIANT `payload` does not match the Avro record `schema`, or null."""
    return _Compiler(schema).problem(payload, schema)
