import pytest

from contracts.errors import InvalidSpec
from contracts.spec import load_spec
from control.validation import check_language


def spec(**output: object) -> dict:
    return {
        "name": "playback",
        "owner": "team-a",
        "outputs": [
            {"name": "ok", "sink": {"type": "hive"}},
            {"name": "search", "sink": {"type": "elasticsearch"}, **output},
        ],
    }


def test_valid_filters_and_projections_pass() -> None:
    check_language(load_spec(spec(filter="country = 'US'", projection=["guid", "a.b as c"])))


def test_broken_ones_name_the_output_field_and_column() -> None:
    with pytest.raises(InvalidSpec) as caught:
        check_language(load_spec(spec(filter="country = ", projection=["*", "guid"])))
    problems = caught.value.details["problems"]
    assert [(p["field"], p["column"]) for p in problems] == [
        ("outputs.1.projection", 1),
        ("outputs.1.filter", 11),
    ]
    assert "expected a value" in problems[1]["message"]
