import pytest

from contracts.errors import InvalidSpec
from contracts.spec import load_spec
from control.validation import check_spec


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
    check_spec(load_spec(spec(filter="country = 'US'", projection=["guid", "a.b as c"])))


def test_broken_ones_name_the_output_field_and_column() -> None:
    with pytest.raises(InvalidSpec) as caught:
        check_spec(load_spec(spec(filter="country = ", projection=["*", "guid"])))
    problems = caught.value.details["problems"]
    assert [(p["field"], p["column"]) for p in problems] == [
        ("outputs.1.projection", 1),
        ("outputs.1.filter", 11),
    ]
    assert "expected a value" in problems[1]["message"]


def test_a_sink_checks_its_own_config() -> None:
    loop = {
        "name": "playback",
        "owner": "team-a",
        "outputs": [{"name": "again", "sink": {"type": "keystone", "stream": "playback"}}],
    }
    with pytest.raises(InvalidSpec) as caught:
        check_spec(load_spec(loop))
    [problem] = caught.value.details["problems"]
    assert problem["field"] == "outputs.0.sink"
    assert "its own stream" in problem["message"]
