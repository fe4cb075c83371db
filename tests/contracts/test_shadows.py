"""Shadows' pure parts: where a shadow writes (never a live target, by name or pattern), how a
comparison adds batches up (each once, within its bounds), and which spec changes a running
shadow refuses."""

from __future__ import annotations

import fnmatch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keystone.contracts.errors import Conflict, InvalidSpec
from keystone.contracts.names import (
    dead_letter_topic,
    fronting_topic,
    hive_table,
    index_prefix,
    output_topic,
    topic_key,
)
from keystone.contracts.shadows import (
    OTHER_FIELDS,
    BatchComparison,
    Comparison,
    Difference,
    Result,
    Shadow,
    ShadowBounds,
    ShadowEnd,
    ShadowPhase,
    change_refusal,
)
from keystone.contracts.spec import OutputSpec, StreamSpec, load_spec
from keystone.router.plan import shadow_plan

NAMES = st.from_regex(r"[a-z][a-z0-9]{1,3}(_[a-z0-9]{1,3}){0,2}", fullmatch=True)
SINKS = [{"type": "kafka"}, {"type": "hive"}, {"type": "elasticsearch"}]


def spec_of(stream: str, output: str, sink: dict) -> StreamSpec:
    return load_spec({"name": stream, "owner": "team", "outputs": [{"name": output, "sink": sink}]})


@given(NAMES, NAMES, NAMES, NAMES)
def test_a_shadows_targets_are_no_live_targets(s1: str, o1: str, s2: str, o2: str) -> None:
    """Whatever two pairs of stream and output: the first's shadow's topic is no topic of the
    second's (in Kafka's collision form too), its table no table, and no live output's index
    pattern matches its indices."""
    for sink in SINKS:
        shadow = spec_of(s1, o1, sink).outputs[0].sink.shadowed()
        topic = shadow.owned_topic(s1, o1)
        if topic is not None:
            live = [output_topic(s2, o2), fronting_topic(s2), dead_letter_topic(s2)]
            assert topic_key(topic) not in {topic_key(t) for t in live}
        table = shadow.table(s1, o1)
        if table is not None:
            assert table not in (hive_table(s2, o2), hive_table(s2, "archive"))
        if sink["type"] == "elasticsearch":
            index = f"{shadow.index_prefix(s1, o1)}2026.11.30"  # type: ignore[attr-defined]
            assert not fnmatch.fnmatch(index, f"{index_prefix(s2, o2)}*")


def test_a_keystone_outputs_shadow_writes_a_topic_of_its_own() -> None:
    spec = spec_of("orders", "forward", {"type": "keystone", "stream": "audit"})
    sink = spec.outputs[0].sink
    assert sink.record_topic("orders", "forward") == "keystone.audit"
    shadowed = sink.shadowed()
    assert shadowed.record_topic("orders", "forward") == "keystone-shadow.orders-forward"
    assert shadowed.target("orders", "forward") == "topic keystone-shadow.orders-forward"
    assert not sink.shadow and shadowed != sink


def test_no_output_may_name_a_shadows_topic() -> None:
    with pytest.raises(InvalidSpec) as refused:
        spec_of("orders", "out", {"type": "kafka", "topic": "keystone-shadow.orders-x"})
    assert "'keystone-shadow'" in refused.value.details["problems"][0]["message"]


BOUNDS = ShadowBounds(minutes=2, fields=2, samples=2)


def sample(guid: str) -> Difference:
    return Difference(guid=guid, timestamp=0, fields={"a": ("1", "2")})


def test_a_comparison_counts_each_batch_once_within_its_bounds() -> None:
    first = BatchComparison(
        minutes={10: {Result.EQUAL: 3, Result.DIFFERING: 2}},
        fields={"a": 2, "b": 1},
        samples=[sample("g1"), sample("g2")],
        delivered=5,
    )
    one = Comparison().add(0, first, BOUNDS, now=1.0)
    assert one.totals == {Result.EQUAL: 3, Result.DIFFERING: 2}
    assert one.add(0, first, BOUNDS, now=2.0) is one  # run again after a crash: not again
    second = BatchComparison(
        minutes={11: {Result.ONLY_LIVE: 1}, 12: {Result.DIFFERING: 1}},
        fields={"c": 1, "a": 1},
        samples=[sample("g3")],
        dead_lettered=1,
    )
    two = one.add(1, second, BOUNDS, now=3.0)
    assert two.totals == {Result.EQUAL: 3, Result.DIFFERING: 3, Result.ONLY_LIVE: 1}
    assert sorted(two.minutes) == [11, 12]  # the newest two minutes kept
    assert two.fields == {"a": 3, "b": 1, OTHER_FIELDS: 1}  # two fields named, the rest other
    assert [s.guid for s in two.samples] == ["g3", "g1"]
    assert (two.batch, two.delivered, two.dead_lettered, two.updated_at) == (1, 5, 1, 3.0)


LIVE = {"name": "out", "filter": "n > 1", "sink": {"type": "kafka"}}
CHANGED = {**LIVE, "filter": "n > 2"}


def stream(output: dict, schema: dict | None = None) -> StreamSpec:
    return load_spec({"name": "orders", "owner": "team", "outputs": [output], "schema": schema})


def shadow(phase: ShadowPhase = ShadowPhase.RUNNING) -> Shadow:
    return Shadow(
        id="sh-0123456789ab",
        output="out",
        version=OutputSpec.model_validate(CHANGED),
        live=OutputSpec.model_validate(LIVE),
        start={0: 5},
        expires_at=100.0,
        rate=10,
        requested_at=0.0,
        by="team",
        phase=phase,
        end=None if phase is ShadowPhase.RUNNING else ShadowEnd.DROPPED,
    )


def test_a_running_shadow_keeps_its_output_and_the_schema_as_they_are() -> None:
    old, running = stream(LIVE), {"out": shadow()}
    refused = change_refusal(old, stream(CHANGED), running)
    assert isinstance(refused, Conflict) and "promote or drop" in refused.message
    schema = {"type": "record", "name": "e", "fields": [{"name": "n", "type": "int"}]}
    assert change_refusal(old, stream(LIVE, schema), running) is not None
    # Its promotion, to its version exactly, is the one change to the output it lets through.
    assert change_refusal(old, stream(CHANGED), running, promoting=shadow()) is None
    other = {**CHANGED, "filter": "n > 3"}
    assert change_refusal(old, stream(other), running, promoting=shadow()) is not None
    # Other changes of the stream go on.
    assert change_refusal(old, stream(LIVE).model_copy(update={"partitions": 8}), running) is None


def test_a_stream_is_deleted_only_once_its_shadows_have_ended() -> None:
    old = stream(LIVE)
    assert change_refusal(old, None, {"out": shadow(ShadowPhase.ENDING)}) is not None
    assert change_refusal(old, None, {"out": shadow(ShadowPhase.ENDED)}) is None
    # An ending shadow holds back no change of its output.
    assert change_refusal(old, stream(CHANGED), {"out": shadow(ShadowPhase.ENDING)}) is None


def test_a_shadow_reads_at_most_its_rate_from_where_it_starts() -> None:
    microbatch = shadow().model_copy(
        update={
            "version": OutputSpec.model_validate(
                {**CHANGED, "delivery": {"mode": "microbatch", "trigger": "5 seconds"}}
            )
        }
    )
    plan = shadow_plan(microbatch, topic="keystone.orders", partitions=2, batch_limit=1000)
    assert plan.starting == '{"keystone.orders": {"0": 5, "1": -2}}'
    # Its version's batches 5 s apart: 10 s at the closest, as a realtime version's.
    assert (plan.max_per_trigger, plan.trigger, plan.real_time) == (100, "10 seconds", False)
    realtime = shadow_plan(shadow(), topic="keystone.orders", partitions=1, batch_limit=1000)
    assert (realtime.max_per_trigger, realtime.trigger) == (100, "10 seconds")
    slow = microbatch.model_copy(
        update={
            "version": OutputSpec.model_validate(
                {**CHANGED, "delivery": {"mode": "microbatch", "trigger": "1 minute"}}
            )
        }
    )
    plan = shadow_plan(slow, topic="keystone.orders", partitions=1, batch_limit=500)
    assert (plan.max_per_trigger, plan.trigger) == (500, "60 seconds")  # the batch limit
