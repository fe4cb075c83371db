"""Field lineage, and schema changes checked against the fields outputs read (pure: no stack;
the API's 409 and `force` are in test_api.py)."""

from __future__ import annotations

import pytest

from keystone.contracts.errors import Conflict
from keystone.contracts.spec import StreamSpec, load_spec
from keystone.control.lineage import Declared, breaking_changes, check_schema_change, lineage
from keystone.control.lineage import schema_fields as fields

ADDRESS = {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]}
USER = {
    "type": "record",
    "name": "User",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "email", "type": ["null", "string"], "default": None},
        {"name": "home", "type": ADDRESS},
        {"name": "work", "type": ["null", "Address"], "default": None},  # by its name
    ],
}
SCHEMA = {
    "type": "record",
    "name": "Play",
    "fields": [
        {"name": "title", "type": "string"},
        {"name": "seconds", "type": ["int", "double"]},
        {"name": "user", "type": USER},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "country", "type": "string"},
    ],
}


def spec(schema: dict | None = SCHEMA, **projections: list[str]) -> StreamSpec:
    outputs = [
        {
            "name": "search",
            "sink": {"type": "elasticsearch"},
            "filter": "country = 'US' and user.id > 0",
            "projection": ["title", "hash(user.email) as email", "seconds * 1000 as ms"],
        },
        {"name": "all", "sink": {"type": "hive"}, "projection": ["* except user.email"]},
        *(
            {"name": name, "sink": {"type": "kafka"}, "projection": items}
            for name, items in projections.items()
        ),
    ]
    return load_spec(
        {"name": "plays", "owner": "team-a", "avro_schema": schema, "outputs": outputs}
    )


def test_the_schemas_fields_are_its_records_fields_as_dotted_paths() -> None:
    assert fields(SCHEMA) == {
        "title": Declared(("string",), False),
        "seconds": Declared(("int", "double"), False),
        "user": Declared(("record User",), False),
        "user.id": Declared(("long",), False),
        "user.email": Declared(("string",), True),
        "user.home": Declared(("record Address",), False),
        "user.home.city": Declared(("string",), False),
        "user.work": Declared(("record Address",), True),
        "user.work.city": Declared(("string",), False),
        "tags": Declared(("array of string",), False),
        "country": Declared(("string",), False),
    }


def test_lineage_says_which_output_reads_which_field_and_where() -> None:
    found = lineage(spec(extra=["title", "tags.first", "missing_field", "user.work.city"]))
    readers = {use.field: use.readers for use in found.fields}
    assert readers["country"] == {"search": ["filter"]}
    assert readers["user.id"] == {"search": ["filter"]}
    assert readers["user.email"] == {"search": ["projection"]}  # hashed: read all the same
    assert readers["title"] == {"search": ["projection"], "extra": ["projection"]}
    assert found.whole == ["all"]  # '*' reads no field by name; its except path is not read
    assert found.unread == ["tags", "user", "user.home", "user.home.city", "user.work"]
    assert "user.work.city" not in found.unread  # read below
    assert found.undeclared == ["missing_field", "tags.first"]  # not through an array either
    first = found.warnings()[0]
    assert first.startswith("output extra reads missing_field, which the stream's schema does")


def test_without_a_schema_nothing_is_undeclared() -> None:
    found = lineage(spec(schema=None))
    assert found.undeclared == [] and found.warnings() == []
    assert all(use.declared is None for use in found.fields)


def retyped(**changes: object) -> dict:
    """SCHEMA with fields changed (a value None removes the field)."""
    kept = [f for f in SCHEMA["fields"] if changes.get(f["name"], f) is not None]
    return {**SCHEMA, "fields": [{**f, "type": changes.get(f["name"], f["type"])} for f in kept]}


def test_a_schema_that_removes_or_retypes_a_field_an_output_reads_is_refused() -> None:
    old = spec()
    removed = spec(schema=retyped(country=None))
    assert breaking_changes(old, removed) == [
        {"output": "search", "field": "country", "was": "string", "now": None}
    ]
    user = {**USER, "fields": [{"name": "id", "type": "string"}, *USER["fields"][1:]]}
    changed = spec(schema=retyped(user=user))
    assert breaking_changes(old, changed) == [
        {"output": "search", "field": "user.id", "was": "long", "now": "string"}
    ]
    with pytest.raises(Conflict) as caught:
        check_schema_change(old, changed, force=False)
    assert "output search reads user.id, which it changes from long to string" in str(caught.value)
    assert caught.value.details["problems"][0]["field"] == "user.id"
    check_schema_change(old, changed, force=True)  # forced: taken as it is


@pytest.mark.parametrize(
    "schema",
    [
        # A new optional field, a field made optional, one no output reads removed, a type
        # no reader reads changed: compatible for every reader.
        {
            **SCHEMA,
            "fields": [
                *SCHEMA["fields"],
                {"name": "new", "type": ["null", "long"], "default": None},
            ],
        },
        retyped(title=["null", "string"]),
        retyped(tags=None),
        retyped(tags="string"),
    ],
)
def test_compatible_evolution_passes(schema: dict) -> None:
    assert breaking_changes(spec(), spec(schema=schema)) == []
    check_schema_change(spec(), spec(schema=schema), force=False)


def test_a_field_no_schema_declared_before_is_no_readers_promise() -> None:
    old = spec(extra=["missing_field"])
    new = spec(schema=retyped(country=None), extra=["missing_field"])
    assert [p["field"] for p in breaking_changes(old, new)] == ["country"]
    assert breaking_changes(spec(schema=None), spec()) == []  # a first schema breaks nothing


def kinds(name: str = "E", /, **fields: object) -> dict:
    return {
        "type": "record",
        "name": name,
        "fields": [{"name": n, "type": t} for n, t in fields.items()],
    }


def reading(schema: dict | None, *items: str, filter_text: str | None = None) -> StreamSpec:
    output = {"name": "out", "sink": {"type": "hive"}, "projection": list(items)}
    if filter_text:
        output["filter"] = filter_text
    return load_spec({"name": "st", "owner": "team-a", "avro_schema": schema, "outputs": [output]})


COLOR = {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"]}
MILLIS = {"type": "long", "logicalType": "timestamp-millis"}


@pytest.mark.parametrize(
    ("old", "new", "items", "broken"),
    [
        # A path below a map: its values' type is what is read.
        (
            kinds(attrs={"type": "map", "values": "string"}),
            kinds(attrs={"type": "map", "values": "long"}),
            ["attrs.color"],
            ["attrs.color"],
        ),
        (
            kinds(attrs={"type": "map", "values": "string"}),
            kinds(),
            ["attrs.color"],
            ["attrs.color"],
        ),
        # A record read whole: every field within it counts.
        (
            kinds(user=kinds("U", id="string")),
            kinds(user=kinds("U", id="long")),
            ["user"],
            ["user.id"],
        ),
        (
            kinds(user=kinds("U", id="string", n="long")),
            kinds(user=kinds("U", id="string")),
            ["user"],
            ["user.n"],
        ),
        # A logical type is part of the type; an enum's symbols too, but more of them is fine.
        (
            kinds(at=MILLIS),
            kinds(at={**MILLIS, "logicalType": "timestamp-micros"}),
            ["date_of(at) as d"],
            ["at"],
        ),
        (kinds(c=COLOR), kinds(c={**COLOR, "symbols": ["RED"]}), ["c"], ["c"]),
        (kinds(c=COLOR), kinds(c={**COLOR, "symbols": ["RED", "BLUE", "GREEN"]}), ["c"], []),
        # An enum defined in one field and named in another is the same type wherever defined.
        (kinds(a=COLOR, b="Color"), kinds(a="string", b=COLOR), ["b"], []),
        # The schema taken away: nothing declares what is read any more.
        (kinds(n="long"), None, ["n"], ["n"]),
        # A union widened takes every value it took: no reader breaks. Narrowed, it does.
        (kinds(n="long"), kinds(n=["long", "string"]), ["n"], []),
        (kinds(n=["long", "string"]), kinds(n="long"), ["n"], ["n"]),
    ],
)
def test_what_counts_as_breaking(
    old: dict, new: dict | None, items: list[str], broken: list[str]
) -> None:
    found = breaking_changes(reading(old, *items), reading(new, *items))
    assert [p["field"] for p in found] == broken


def test_a_path_below_a_map_is_declared_by_the_map() -> None:
    found = lineage(reading(kinds(attrs={"type": "map", "values": "string"}), "attrs.color"))
    assert found.undeclared == [] and found.warnings() == []
    [use] = [u for u in found.fields if u.field == "attrs.color"]
    assert use.declared == Declared(("string",), True)
