"""How the router's queries run, decided without Spark: where an output's query starts reading,
how much a trigger reads, its trigger, what bounds a rewind's replay, and the router's size."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from keystone.contracts.checkpoints import Offsets
from keystone.contracts.recovery import RewindPhase
from keystone.contracts.spec import OutputSpec, load_spec
from keystone.router.plan import (
    BACK_TO_BACK,
    BATCH_LIMIT,
    REPLAY_TRIGGER,
    DeadLetterPlan,
    QueryPlan,
    batch_limit,
    dead_letter_plan,
    query_plan,
    replay_bound,
    router_slots,
    runs_realtime,
    sized,
)
from tests.contracts.test_recovery import rewind

TOPIC = "keystone.plays"
LIMIT = 240_000
SPEC = {
    "name": "plays",
    "owner": "team",
    "partitions": 4,
    "outputs": [
        {"name": "kk", "sink": {"type": "kafka"}},
        {"name": "ff", "sink": {"type": "keystone", "stream": "other"}},
        {"name": "slow", "sink": {"type": "kafka"}, "delivery": {"mode": "microbatch"}},
        {"name": "es", "sink": {"type": "elasticsearch"}},
        {"name": "hh", "sink": {"type": "hive"}},
    ],
}


def output(**fields: object) -> OutputSpec:
    spec = load_spec({"name": "plays", "owner": "team", "outputs": [{"name": "out", **fields}]})
    return spec.outputs[0]


KAFKA = output(sink={"type": "kafka"})  # realtime by default
ELASTICSEARCH = output(sink={"type": "elasticsearch"})  # realtime, but written from Python
HIVE = output(sink={"type": "hive"})  # micro-batches
EARLIEST = output(
    sink={"type": "kafka"},
    start="earliest",
    delivery={"mode": "microbatch", "trigger": "5 seconds"},
)


def plan(out: OutputSpec, **rewound: object) -> QueryPlan:
    at = rewind(**rewound) if rewound else None
    return query_plan(out, at, topic=TOPIC, batch_limit=LIMIT)


def how(plan: QueryPlan) -> tuple[int | None, str, bool]:
    """How much a trigger reads, and the trigger: all but where it starts."""
    return plan.max_per_trigger, plan.trigger, plan.real_time


def test_an_output_never_rewound_starts_at_its_start_in_its_own_mode() -> None:
    assert plan(HIVE) == QueryPlan("latest", LIMIT, "10 seconds", False)
    assert plan(EARLIEST) == QueryPlan("earliest", LIMIT, "5 seconds", False)


def test_real_time_mode_reads_without_a_limit_and_checkpoints_at_the_outputs_trigger() -> None:
    assert plan(KAFKA) == QueryPlan("latest", None, "60 seconds", True)


def test_a_realtime_output_real_time_mode_cannot_run_runs_micro_batches_back_to_back() -> None:
    assert BACK_TO_BACK == "0 seconds"
    assert plan(ELASTICSEARCH) == QueryPlan("latest", LIMIT, "0 seconds", False)


def test_a_rewound_output_starts_at_the_rewinds_offsets_as_sparks_kafka_source_takes_them() -> None:
    start = {10: 5, 1: 20, 0: 10}
    starting = plan(KAFKA, start=start).starting
    # Partitions in order, as strings, under the fronting topic: Spark's startingOffsets.
    assert starting == '{"keystone.plays": {"0": 10, "1": 20, "10": 5}}'
    assert json.loads(starting) == {TOPIC: {"0": 10, "1": 20, "10": 5}}
    # Caught up, it still names them: a new checkpoint reads them, a started one goes on.
    caught_up = plan(HIVE, start=start, phase=RewindPhase.CAUGHT_UP)
    assert caught_up.starting == starting


@pytest.mark.parametrize("out", [KAFKA, ELASTICSEARCH, HIVE, EARLIEST])
def test_a_replay_reads_its_rate_a_second_in_micro_batches_whatever_the_outputs_mode(
    out: OutputSpec,
) -> None:
    assert how(plan(out, rate=100)) == (100, "1 second", False)
    assert REPLAY_TRIGGER == "1 second"
    # Never more than a micro-batch of the router's at once.
    assert plan(out, rate=LIMIT * 10).max_per_trigger == LIMIT


def test_a_caught_up_rewind_runs_in_the_outputs_own_mode_again() -> None:
    caught_up = {"phase": RewindPhase.CAUGHT_UP, "rate": 100}
    assert how(plan(KAFKA, **caught_up)) == (None, "60 seconds", True)
    assert how(plan(ELASTICSEARCH, **caught_up)) == (LIMIT, "0 seconds", False)
    assert how(plan(HIVE, **caught_up)) == (LIMIT, "10 seconds", False)


def never() -> Offsets:
    raise AssertionError("read though not needed")


def test_a_first_generation_replays_nothing_and_reads_nothing_to_know_it() -> None:
    at = rewind(start={0: 10, 1: 20})
    for realtime in (True, False):
        bound = replay_bound(at, earlier=False, realtime=realtime, planned=never, topic_end=never)
        assert bound == {0: 10, 1: 20}


def test_a_real_time_mode_output_replays_up_to_where_the_topic_ends() -> None:
    # Its running epoch's offsets are not in the checkpoint: the topic's end bounds it.
    at = rewind(start={0: 10, 1: 20})
    ends = {0: 500, 1: 600}
    bound = replay_bound(at, earlier=True, realtime=True, planned=never, topic_end=lambda: ends)
    assert bound == ends


@pytest.mark.parametrize(
    ("planned", "expected"),
    [
        ({0: 300, 1: 400}, {0: 300, 1: 400}),  # its last planned batch
        (None, {0: 10, 1: 20}),  # it planned none: the rewind's start
        ({}, {0: 10, 1: 20}),
    ],
)
def test_a_micro_batch_output_replays_up_to_its_earlier_generations_last_planned_batch(
    planned: Offsets | None, expected: Offsets
) -> None:
    at = rewind(start={0: 10, 1: 20})
    # A Hive output's query, or a realtime output's on a standby cluster (in micro-batches).
    bound = replay_bound(at, earlier=True, realtime=False, planned=lambda: planned, topic_end=never)
    assert bound == expected


def test_a_router_is_sized_within_its_specs_bounds() -> None:
    bounds = {"min_events_per_second": 2_000, "max_events_per_second": 8_000}
    spec = load_spec({**SPEC, "sizing": bounds})
    assert sized(spec, None) == 2_000  # the fleet gave none: the smallest
    assert sized(spec, 1_000) == 2_000
    assert sized(spec, 4_000) == 4_000
    assert sized(spec, 64_000) == 8_000


def test_task_slots_hold_each_real_time_partition_and_each_batch_querys_tasks() -> None:
    spec = load_spec(SPEC)  # 4 partitions, 5 outputs (kk and ff in Real-time Mode), the archive on
    assert [o.name for o in spec.outputs if runs_realtime(o)] == ["kk", "ff"]
    assert router_slots(spec, 1_000) == 2 * 4 + (3 + 2) * 1
    assert router_slots(spec, 4_001) == 2 * 4 + (3 + 2) * 2  # one per 4,000 events/s
    assert router_slots(spec, 64_000) == 2 * 4 + (3 + 2) * 4  # one per partition at most
    batches = {"mode": "microbatch"}
    none = load_spec({**SPEC, "outputs": [{**o, "delivery": batches} for o in SPEC["outputs"]]})
    assert router_slots(none, 1_000) == 5 + 2  # none in Real-time Mode: 7 batch queries
    plain = load_spec({**SPEC, "archive": {"enabled": False}})
    assert router_slots(plain, 1_000) == 2 * 4 + (3 + 1) * 1


def test_a_batch_reads_30_seconds_of_the_rate_and_never_fewer_than_the_least() -> None:
    spec = load_spec(SPEC)
    assert batch_limit(spec) == BATCH_LIMIT == 100_000  # sized for the least: 1,000 events/s
    assert batch_limit(spec, 8_000) == 240_000
    bounded = load_spec({**SPEC, "sizing": {"max_events_per_second": 2_000}})
    assert batch_limit(bounded, 64_000) == BATCH_LIMIT  # 60,000 of the bound: the least


def letters(
    outputs: list[dict],
    written: Offsets | None = None,
    resumes: dict[str, Offsets] | None = None,
    generation: int | None = None,
    resumed: bool = False,
    held: tuple[str, ...] = (),
) -> DeadLetterPlan:
    spec = load_spec({"name": "plays", "owner": "team", "partitions": 3, "outputs": outputs})
    return dead_letter_plan(
        spec,
        topic=TOPIC,
        written=written,
        resumes=lambda name: (resumes or {}).get(name),
        generation=generation,
        resumed=resumed,
        held=held,
    )


HOSTS = {"name": "kk", "sink": {"type": "kafka"}}  # realtime Kafka: can write dead letters too
CANNOT = [
    {"name": "es", "sink": {"type": "elasticsearch"}},  # written from Python, per batch
    {"name": "hh", "sink": {"type": "hive"}},
    {"name": "mb", "sink": {"type": "kafka"}, "delivery": {"mode": "microbatch"}},
    {
        "name": "xo",
        "sink": {"type": "kafka"},
        "delivery": {"mode": "microbatch", "guarantee": "exactly_once"},
    },
]


def test_a_new_streams_realtime_kafka_output_writes_its_dead_letters_from_its_start() -> None:
    assert letters([*CANNOT, HOSTS]) == DeadLetterPlan("kk", None, 0, "latest")
    # Not when another output starts earlier: the stream's own query reads from there.
    earliest = {"name": "hh", "sink": {"type": "hive"}, "start": "earliest"}
    assert letters([earliest, HOSTS]) == DeadLetterPlan(None, None, 0, "earliest")
    assert letters([earliest, {**HOSTS, "start": "earliest"}]).host == "kk"


def test_no_output_that_can_write_them_leaves_them_to_the_streams_own_query() -> None:
    assert letters(CANNOT) == DeadLetterPlan(None, None, 0, "latest")
    assert letters(CANNOT, generation=2, resumed=True, written={0: 5}).generation == 2


def test_an_output_takes_them_over_only_if_it_reads_again_all_past_where_they_are_written() -> None:
    written = {0: 10, 1: 20, 2: 30}
    behind = {0: 10, 1: 19, 2: 0}
    assert letters([HOSTS], written, {"kk": behind}, 0, True) == DeadLetterPlan(
        "kk", written, 0, "latest"
    )
    ahead = {0: 11, 1: 19, 2: 0}  # partition 0's event 10 would be no one's
    plan = letters([HOSTS], written, {"kk": ahead}, 0, True)
    assert plan == DeadLetterPlan(None, written, 0, "latest")  # the stream's own goes on
    # A partition the writer never read: an output must read it from its start.
    assert letters([HOSTS], {0: 10}, {"kk": {0: 3, 1: 1}}, 0, True).host is None
    assert letters([HOSTS], {0: 10}, {"kk": {0: 3, 1: 0}}, 0, True).host == "kk"
    # No checkpoint yet: it would start at the topic's end.
    assert letters([HOSTS], written, {}, 0, True).host is None
    # One that does not start (its rewind record does not read) writes nothing.
    assert letters([HOSTS], written, {"kk": behind}, 0, True, held=("kk",)).host is None


def test_the_streams_own_query_takes_over_in_a_new_generation_from_where_they_are_written() -> None:
    written = {0: 10, 2: 30}  # partition 1: never read by the writer, so from its earliest
    plan = letters(CANNOT, written, generation=0, resumed=False)
    expected = {TOPIC: {"0": 10, "1": -2, "2": 30}}
    assert (plan.host, plan.generation, json.loads(plan.starting)) == (None, 1, expected)
    assert letters(CANNOT, written, generation=None).generation == 0


@pytest.mark.parametrize(
    "module",
    ["keystone.router.plan", "keystone.router.supervisor", "keystone.contracts.backoff"],
)
def test_the_decisions_load_without_spark(module: str) -> None:
    # A fresh interpreter: this one may have loaded pyspark for other tests.
    check = f"import sys, {module}; sys.exit(any(m.startswith('pyspark') for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", check], check=False).returncode == 0
