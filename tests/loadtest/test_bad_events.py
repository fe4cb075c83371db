"""`keystone loadtest --bad-events` without a stack: the too strict schema takes every load
event and refuses every bad one, the stream's own spec takes both, the spec goes to control and
back unchanged, and what a run refuses before it changes anything. The run itself on the stack:
tests/loadtest/test_loadtest.py."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter

from keystone.contracts.errors import BadRequest
from keystone.contracts.schema import parse_schema, schema_problems
from keystone.contracts.settings import Settings
from keystone.contracts.spec import PRINCIPAL_MAX, Principal, load_spec
from keystone.loadtest import bad_events
from keystone.loadtest.driver import Plan
from keystone.loadtest.events import EventMaker
from keystone.loadtest.run import Options, _bad_events, loadtest_app

SPEC = load_spec(
    {
        "name": "lt_bad",
        "owner": "team",
        "outputs": [{"name": "clicks", "filter": "seq >= 0", "sink": {"type": "kafka"}}],
    }
)


def test_the_strict_schema_takes_the_load_and_refuses_the_bad_events() -> None:
    strict = parse_schema(bad_events.STRICT)
    load, bad = EventMaker(seed=1, size=300), EventMaker(seed=2, size=300)
    for n in range(200):
        assert schema_problems(load(n), strict) == []
        [problem] = schema_problems(bad_events.bad_event(bad, n), strict)
        assert problem["path"] == bad_events.FIELD


def test_the_strict_spec_is_the_streams_own_but_its_schema() -> None:
    strict = load_spec(bad_events.strict(SPEC))
    assert strict.avro_schema == bad_events.STRICT
    assert strict.model_copy(update={"avro_schema": None}) == SPEC
    assert load_spec(bad_events.own(SPEC)) == SPEC


def test_a_stream_with_a_schema_of_its_own_is_refused() -> None:
    owned = SPEC.model_copy(update={"avro_schema": bad_events.STRICT})
    with pytest.raises(BadRequest, match="has a schema of its own"):
        bad_events.check(owned)


def options(**given: object) -> Options:
    return Options(plan=Plan("lt_bad", rate=10, duration=60), **given)  # type: ignore[arg-type]


def test_the_fix_is_half_way_unless_told_and_within_the_run() -> None:
    assert _bad_events(Settings(), options(), SPEC) is None
    bad = _bad_events(Settings(), options(bad_events=25), SPEC)
    assert bad is not None and (bad.fault.at, bad.fault.count) == (30, 25)
    assert bad.fault.what == "25 events dead-lettered until a fix at 30 s, redriven"
    assert bad.app == "loadtest-lt_bad"  # the stream's own load-test app
    direct = _bad_events(Settings(), options(bad_events=5, fix_at=12, direct="mine"), SPEC)
    assert direct is not None and (direct.fault.at, direct.app) == (12, "mine")
    for late in (0, 60, 75):
        with pytest.raises(BadRequest, match="--fix-at"):
            _bad_events(Settings(), options(bad_events=5, fix_at=late), SPEC)


def test_each_stream_has_its_own_load_test_app_even_with_the_longest_name() -> None:
    # A run gives its app a new key: one app for every stream let a run revoke the key of a
    # run on another stream meanwhile (every request then a 401).
    longest, almost = "s" * 63, "s" * 62 + "t"
    names = [loadtest_app(s) for s in ("lt_main", "lt_side", longest, almost)]
    assert names[:2] == ["loadtest-lt_main", "loadtest-lt_side"]
    assert len(set(names)) == 4
    for name in names:
        assert TypeAdapter(Principal).validate_python(name) == name
        assert len(name) <= PRINCIPAL_MAX
