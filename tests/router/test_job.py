"""The router's pure decisions: how many task slots it asks for, which outputs run under
Real-time Mode, which fields of an event each query parses, and how lag and latency are
counted."""

from __future__ import annotations

import pytest

from keystone.contracts.errors import InvalidSpec, KeystoneError, Unavailable
from keystone.contracts.recovery import Rewind, RewindPhase, Span
from keystone.contracts.registry import RouterState
from keystone.contracts.settings import Settings
from keystone.contracts.spec import load_spec
from keystone.router.counts import LATENCY_BUCKETS, latency_counts
from keystone.router.job import (
    RouterWatch,
    check_home,
    dead_letter_paths,
    paths_read_by,
)
from keystone.router.metrics import LatencyHistogram, lag_of
from keystone.router.plan import batch_limit, router_slots, runs_realtime, started_slots
from keystone.router.spark import spark_conf
from tests.contracts.test_recovery import rewind

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


def test_only_realtime_outputs_spark_writes_itself_run_under_real_time_mode() -> None:
    spec = load_spec(SPEC)
    assert [o.name for o in spec.outputs if runs_realtime(o)] == ["kk", "ff"]


@pytest.mark.parametrize(
    ("master", "expected", "cores"),
    [
        # 2 realtime queries x 4 partitions, and one for each micro-batch query: 3 outputs', the
        # dead letters' and the archive's
        ("local[2]", "local[13]", None),
        ("local[64]", "local[64]", None),
        ("spark://127.0.0.1:7077", "spark://127.0.0.1:7077", "13"),
    ],
)
def test_a_router_gets_a_task_slot_per_realtime_partition_and_one_per_batch_query(
    master: str, expected: str, cores: str | None
) -> None:
    conf = spark_conf(Settings(spark_master=master), "r", slots=router_slots(load_spec(SPEC)))
    assert conf["spark.master"] == expected
    assert conf.get("spark.cores.max") == cores  # a cluster's application asks for its cores


def test_a_stream_without_an_archive_needs_no_slot_for_it() -> None:
    plain = load_spec({**SPEC, "archive": {"enabled": False}})
    assert router_slots(plain) == 12


def test_real_time_mode_checkpoints_no_more_often_than_spark_allows() -> None:
    output = {"name": "kk", "sink": {"type": "kafka"}, "delivery": {"trigger": "2 seconds"}}
    with pytest.raises(InvalidSpec) as caught:
        load_spec({"name": "plays", "owner": "team", "outputs": [output]})
    assert "5 seconds" in caught.value.details["problems"][0]["message"]


def test_lag_sums_what_each_partition_has_left() -> None:
    latest = {"keystone.plays": {"0": 100, "1": 50}}
    end = {"keystone.plays": {"0": 90, "1": 50}}
    assert lag_of(latest, end) == 10
    assert lag_of(None, end) is None


def test_latency_histogram_is_cumulative_like_prometheus_wants() -> None:
    counts = latency_counts([0.001, 0.2, 7.0, 1000.0])
    assert counts["le_0.005"] == 1 and counts["le_0.25"] == 2 and counts["le_10"] == 3
    assert counts["latency_count"] == 4 and counts[f"le_{LATENCY_BUCKETS[-1]}"] == 3
    histogram = LatencyHistogram()
    histogram.add("plays", "kk", counts)
    histogram.add("plays", "kk", counts)
    [family] = histogram.collect()
    samples = {(s.name, s.labels.get("le")): s.value for s in family.samples}
    assert samples[("keystone_delivery_latency_seconds_bucket", "+Inf")] == 8
    assert samples[("keystone_delivery_latency_seconds_count", None)] == 8


def test_each_query_parses_the_paths_its_outputs_read() -> None:
    spec = load_spec(
        {
            "name": "plays",
            "owner": "team",
            "outputs": [
                {
                    "name": "aa",
                    "filter": "user.country = 'US' and not (n > 1 or kind like 'x%')",
                    "projection": ["guid", "title", "device.type as device"],
                    "sink": {"type": "kafka"},
                },
                {"name": "bb", "filter": "1 = ok", "sink": {"type": "kafka"}},
                {"name": "cc", "projection": ["*"], "sink": {"type": "kafka"}},
            ],
        }
    )
    a, b, c = spec.outputs
    read = {("user", "country"), ("n",), ("kind",), ("title",), ("device", "type")}
    assert paths_read_by([a]) == read
    assert paths_read_by([b]) == {("ok",)} and paths_read_by([c]) == frozenset()
    assert paths_read_by(spec.outputs) == read | {("ok",)}
    # The dead-letter query's: every path any of them reads.
    assert dead_letter_paths(spec.outputs) == read | {("ok",)}


class FakeRegistry:
    """What `RouterWatch` reads: each answer in turn (the rewinds, and the router's record's
    size when it follows it), or an error."""

    def __init__(self, *answers: tuple[dict[str, Rewind], set[str]] | KeystoneError | int) -> None:
        self.answers = list(answers)

    def _next(self):
        answer = self.answers.pop(0)
        if isinstance(answer, KeystoneError):
            raise answer
        return answer

    def read_rewinds(self, stream: str) -> tuple[dict[str, Rewind], set[str]]:
        return self._next()

    def router_state(self, stream: str) -> RouterState | None:
        size = self._next()
        return None if size is None else RouterState(sized_for=size)

    def operations(self, kind: type, stream: str) -> dict:
        return {}  # no shadows (a router's shadows: tests/control/test_shadows.py)


def test_the_router_follows_rewinds_and_holds_an_output_whose_record_does_not_read() -> None:
    first = rewind(output="search")
    caught_up = first.model_copy(update={"phase": RewindPhase.CAUGHT_UP})
    registry = FakeRegistry(
        Unavailable("Redis away", retry_after=1),  # before anything is known: not ready
        ({"search": first}, set()),
        Unavailable("Redis away", retry_after=1),  # kept as it was
        ({"search": caught_up}, {"clicks"}),  # clicks unreadable, never known: held
        ({}, {"search", "clicks"}),  # search unreadable now: its last known rewind kept
    )
    watch = RouterWatch(registry, "plays", least=100_000)  # type: ignore[arg-type]
    watch.read()
    assert not watch.ready and watch.plan("search") == (None, 100_000)
    watch.read()
    assert watch.ready and watch.plan("search") == ((1, True), 100_000) and watch.held == set()
    watch.read()
    assert watch.plan("search") == ((1, True), 100_000)
    watch.read()
    assert watch.plan("search") == ((1, False), 100_000) and watch.held == {"clicks"}
    watch.read()
    assert watch.plan("search") == ((1, False), 100_000) and watch.held == {"clicks"}
    assert RouterWatch(None, "plays", least=1).ready  # no registry: never rewound, no waiting


def test_each_clusters_query_of_an_output_follows_the_rewind_where_it_reaches() -> None:
    both = rewind(output="search", clusters={"west": Span(start={0: 3}, until={0: 9})})
    watch = RouterWatch(FakeRegistry(({"search": both}, set())), "plays", least=100)  # type: ignore[arg-type]
    watch.read()
    assert watch.plan("search") == watch.plan("search@west") == ((1, True), 100)
    assert watch.plan("search@south") == (None, 100)  # a cluster it does not reach


def test_a_router_that_resizes_in_place_starts_again_only_queries_whose_batches_change() -> None:
    replaying = rewind(output="clicks")
    registry = FakeRegistry(
        ({}, set()),
        0,  # not sized yet: as it started
        ({}, set()),
        2_000,  # batches of 100,000 still: no query's plan changes
        ({}, set()),
        8_000,  # batches of 240,000
        Unavailable("Redis away", retry_after=1),  # the rewinds kept as they were...
        64_000,  # ...and the size read all the same (outside the started spec's bounds: taken)
        ({"clicks": replaying}, set()),
        None,  # no record (the fleet has not written one): as it was
    )
    watch = RouterWatch(
        registry,  # type: ignore[arg-type]
        "plays",
        least=100_000,
        sized_for=1_000,
        follow_size=True,
        realtime=["clicks"],
    )
    watch.read()
    assert watch.sized_for == 1_000
    plans = {q: watch.plan(q) for q in ("clicks", "clicks@west", "search", "_stream")}
    assert plans == {
        "clicks": (None, None),
        "clicks@west": (None, 100_000),  # a standby's queries run in micro-batches
        "search": (None, 100_000),
        "_stream": (None, 100_000),
    }
    watch.read()
    assert watch.sized_for == 2_000 and {q: watch.plan(q) for q in plans} == plans
    watch.read()
    assert watch.sized_for == 8_000
    # A realtime output runs on; a query in micro-batches takes the new size (a new plan).
    assert watch.plan("clicks") == plans["clicks"] and watch.plan("search") == (None, 240_000)
    watch.read()
    assert watch.sized_for == 64_000 and watch.batch_limit == 1_920_000
    watch.read()  # a realtime output replaying a rewind reads in micro-batches of the size too
    assert watch.plan("clicks") == ((1, True), 1_920_000) and watch.sized_for == 64_000
    # A router on a cluster does not follow the figure: a new size starts it again.
    fixed = RouterWatch(
        FakeRegistry(({}, set())),  # type: ignore[arg-type]
        "plays",
        least=100_000,
        sized_for=8_000,
    )
    fixed.read()
    assert fixed.plan("search") == (None, 240_000)


def test_a_router_sized_for_more_gives_its_batch_queries_more_slots_and_bigger_batches() -> None:
    spec = load_spec(SPEC)  # 4 partitions: 2 realtime queries, 5 micro-batch queries
    assert router_slots(spec, 1_000) == 8 + 5 * 1
    assert router_slots(spec, 8_000) == 8 + 5 * 2  # one slot per 4,000 events/s
    assert router_slots(spec, 64_000) == 8 + 5 * 4  # at most one per partition
    assert batch_limit(spec, 1_000) == 100_000  # never fewer
    assert batch_limit(spec, 8_000) == 240_000  # 30 s of the rate
    bounded = load_spec({**SPEC, "sizing": {"max_events_per_second": 4_000}})
    assert batch_limit(bounded, 64_000) == 120_000  # within the spec's bounds


def test_a_local_router_starts_with_a_task_slot_per_partition_for_every_query() -> None:
    spec = load_spec(SPEC)  # 4 partitions: 2 realtime queries, 5 micro-batch queries
    # Threads cost nothing idle: all any size may use, so that a new size needs no restart,
    # whatever the bounds it started with (the owner may move them while it runs).
    assert started_slots(spec, 1_000, "local[*]") == 8 + 5 * 4
    bounded = load_spec({**SPEC, "sizing": {"max_events_per_second": 4_000}})
    assert router_slots(bounded, 4_000) == 8 + 5 * 1
    assert started_slots(bounded, 1_000, "local[4]") == 8 + 5 * 4
    # A cluster's cores are held while the application runs: those of its size now.
    assert started_slots(spec, 1_000, "spark://127.0.0.1:7077") == 8 + 5 * 1


def test_a_router_refuses_settings_that_make_another_cluster_home(tmp_path) -> None:
    """Home's queries keep the bare checkpoint names: another home would resume from them."""
    settings = Settings(state_dir=tmp_path)
    check_home(settings, "plays", "east")
    check_home(settings, "plays", "east")  # as made: goes on
    with pytest.raises(KeystoneError, match="made with fronting cluster east as home, not west"):
        check_home(settings, "plays", "west")
