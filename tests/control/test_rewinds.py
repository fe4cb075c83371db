"""Rewinds planned on their own: where a replay starts and stops, what each sink is told, and
what is refused, with the registry, the streams and Kafka's positions given as plain values
(the real ones: tests/router/test_recovery.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from keystone.contracts.checkpoints import Offsets
from keystone.contracts.errors import Conflict, Gone, LimitExceeded, Unavailable, Unprocessable
from keystone.contracts.fronting import FrontingCluster
from keystone.contracts.recovery import (
    Backfill,
    JobPhase,
    Operation,
    Redrive,
    Replaced,
    RestorePoint,
    Rewind,
    Selection,
    Span,
)
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec, load_spec
from keystone.control.positions import Extent
from keystone.control.rewinds import Rewinds, Target
from keystone.control.tenancy import Caller
from tests.contracts.test_recovery import rewind as a_rewind

NOW = 1_800_000_000.0
SPEC = load_spec(
    {
        "name": "plays",
        "owner": "team-a",
        "partitions": 2,
        "outputs": [
            {"name": "clicks", "sink": {"type": "kafka"}},
            {"name": "warehouse", "sink": {"type": "hive"}},
            {"name": "search", "sink": {"type": "elasticsearch"}},
        ],
    }
)
TEAM = Caller(name="team-a", admin=False)


def point(
    generation: int, batch: int, offsets: Offsets, age: float, query: str = "q0", cluster: str = ""
) -> RestorePoint:
    return RestorePoint(
        id=RestorePoint.make_id(generation, batch, cluster),
        time=NOW - age,
        generation=generation,
        batch=batch,
        query=query,
        offsets=offsets,
        cluster=cluster,
    )


# Newest first, as the store answers: generation 0 (query q0) ran to batch 3 and further, then
# a rewind took it back to offsets 40 (generation 1, query q1, its points after 0-3 forgotten).
POINTS = [
    point(1, 2, {0: 90, 1: 80}, age=60, query="q1"),
    point(1, -1, {0: 40, 1: 40}, age=600, query="q1"),
    point(0, 3, {0: 30, 1: 30}, age=1800),
    point(0, -1, {0: 0, 1: 0}, age=3000),
]


@dataclass
class FakeStore:
    rewound: dict[str, Rewind] = field(default_factory=dict)
    points: list[RestorePoint] = field(default_factory=lambda: list(POINTS))
    backfilled: dict[str, Backfill] = field(default_factory=dict)
    redriven: dict[str, Redrive] = field(default_factory=dict)  # by stream

    def rewinds(self, stream: str) -> dict[str, Rewind]:
        return self.rewound

    def backfills(self, stream: str) -> dict[str, Backfill]:
        return self.backfilled

    def operations(self, kind: type[Operation], stream: str) -> dict[str, Operation]:
        held = {Rewind: self.rewound, Backfill: self.backfilled, Redrive: self.redriven}
        return held[kind]  # type: ignore[return-value,index]

    def restore_points(self, stream: str, output: str) -> list[RestorePoint]:
        return self.points


class FakeStreams:
    def get(self, caller: Caller, name: str) -> StreamSpec:
        return SPEC


@dataclass
class FakePositions:
    """The fronting topic holds offsets `earliest` to `end`; record timestamps: one a second
    from `first_at`, offset by offset."""

    earliest: Offsets = field(default_factory=lambda: {0: 0, 1: 0})
    end: Offsets = field(default_factory=lambda: {0: 100, 1: 100})
    first_at: float = NOW - 100
    others: dict[str, FakePositions] = field(default_factory=dict)  # other fronting clusters'

    def on(self, cluster: FrontingCluster) -> FakePositions:
        if cluster.name not in self.others:
            raise Unavailable(f"{cluster.name} is lost", retry_after=5)
        return self.others[cluster.name]

    def extent(self, topic: str) -> Extent:
        return Extent(dict(self.earliest), dict(self.end))

    def at_time(self, topic: str, epoch_ms: int) -> Offsets:
        offset = max(0, int(epoch_ms / 1000 - self.first_at))
        return {p: max(self.earliest[p], min(offset, self.end[p])) for p in self.end}

    def first_timestamp(self, topic: str, offsets: Offsets) -> float | None:
        held = [o for p, o in offsets.items() if o < self.end[p]]
        return self.first_at + min(held) if held else None


def rewinds(
    tmp_path: Path, store: FakeStore | None = None, clusters: str = "main", **positions: object
) -> Rewinds:
    return Rewinds(
        Settings(state_dir=tmp_path, fronting_clusters=clusters),
        store or FakeStore(),  # type: ignore[arg-type]
        FakeStreams(),  # type: ignore[arg-type]
        FakePositions(**positions),  # type: ignore[arg-type]
        clock=lambda: NOW,
    )


def test_a_kafka_output_replays_from_the_exact_position_to_the_topics_end(tmp_path: Path) -> None:
    plan = rewinds(tmp_path).plan(TEAM, "plays", "clicks", Target(offsets={0: 50, 1: 45}), None)
    rewind = plan.rewind
    assert rewind.start == {0: 50, 1: 45} and rewind.until == {0: 100, 1: 100}
    assert rewind.total == 105 and rewind.generation == 1 and rewind.replaced == []
    assert rewind.rate == SPEC.recovery.max_events_per_second
    assert plan.replay == "append-only" and "ks_replay=" + rewind.id in plan.effect
    # Points past the start describe a history the rewind undoes.
    assert {p.id for p in plan.dropped} == {"1-2"}


def test_a_hive_output_starts_at_the_restore_point_at_or_before_and_replaces_what_follows(
    tmp_path: Path,
) -> None:
    store = FakeStore()
    planner = rewinds(tmp_path, store)
    plan = planner.plan(TEAM, "plays", "warehouse", Target(offsets={0: 35, 1: 45}), None)
    assert plan.rewind.restore_point == "0-3" and plan.rewind.start == {0: 30, 1: 30}
    # Query q0's batches after 3, and every batch of the later generation's query.
    assert plan.rewind.replaced == [Replaced(query="q0", after=3), Replaced(query="q1", after=-1)]
    assert {p.id for p in plan.dropped} == {"1-2", "1-start"}
    assert plan.replay == "resettable"
    # Within the latest generation: only its batches after the point.
    plan = planner.plan(TEAM, "plays", "warehouse", Target(offsets={0: 95, 1: 85}), None)
    assert plan.rewind.restore_point == "1-2"
    assert plan.rewind.replaced == [Replaced(query="q1", after=2)]


def test_a_time_starts_at_the_first_event_at_or_after_it(tmp_path: Path) -> None:
    when = datetime.fromtimestamp(NOW - 30, UTC)
    plan = rewinds(tmp_path).plan(TEAM, "plays", "search", Target(to=when), None)
    assert plan.rewind.start == {0: 70, 1: 70}
    assert plan.rewind.target == when.isoformat().replace("+00:00", "Z")
    assert plan.replay == "idempotent"


def test_past_the_topics_retention_is_refused_naming_the_earliest_position(
    tmp_path: Path,
) -> None:
    gone = {"earliest": {0: 20, 1: 20}}
    with pytest.raises(Unprocessable) as refused:
        rewinds(tmp_path, **gone).plan(TEAM, "plays", "clicks", Target(offsets={0: 0, 1: 30}), None)
    assert refused.value.details["earliest"] == {0: 20, 1: 20}
    assert "retention" in refused.value.message and "0:20, 1:20" in refused.value.message
    early = datetime.fromtimestamp(NOW - 99, UTC)  # before the first record still kept
    with pytest.raises(Unprocessable) as refused:
        rewinds(tmp_path, **gone).plan(TEAM, "plays", "clicks", Target(to=early), None)
    assert refused.value.details["earliest"] == {0: 20, 1: 20}
    assert "retention" in refused.value.message and "0:20, 1:20" in refused.value.message


def test_what_cannot_be_is_refused(tmp_path: Path) -> None:
    planner = rewinds(tmp_path)
    future = datetime.fromtimestamp(NOW + 60, UTC)
    cases = [
        (Target(to=future), Unprocessable, "future"),
        (Target(restore_point="0-1"), Gone, "no longer exists"),
        (Target(offsets={0: 1, 7: 1}), Unprocessable, "no partition 7"),
        (Target(offsets={0: 101}), Unprocessable, "past the topic's end"),
    ]
    for target, error, words in cases:
        with pytest.raises(error, match=words):
            planner.plan(TEAM, "plays", "clicks", target, None)
    with pytest.raises(LimitExceeded):
        planner.plan(TEAM, "plays", "clicks", Target(restore_point="0-3"), 10**9)
    no_points = FakeStore(points=[point(0, 7, {0: 60, 1: 50}, age=900)])  # all after
    with pytest.raises(Unprocessable, match="no restore point"):
        rewinds(tmp_path, no_points).plan(
            TEAM, "plays", "warehouse", Target(offsets={0: 10, 1: 10}), None
        )


def test_a_hive_outputs_rewind_waits_for_the_streams_redrive(tmp_path: Path) -> None:
    """Both could write an event a Hive table then holds twice; a Kafka output's replay
    copies are flagged, so its rewind goes on."""
    redriving = Redrive(
        id=Redrive.new_id(), rate=10, requested_at=NOW, by="x", until={}, selection=Selection()
    )
    store = FakeStore(redriven={"plays": redriving})
    with pytest.raises(Conflict, match=f"redriving its dead letters \\({redriving.id}\\)"):
        rewinds(tmp_path, store).plan(TEAM, "plays", "warehouse", Target(restore_point="0-3"), None)
    rewinds(tmp_path, store).plan(TEAM, "plays", "clicks", Target(restore_point="0-3"), None)
    store.redriven["plays"] = redriving.model_copy(update={"phase": JobPhase.DONE})
    rewinds(tmp_path, store).plan(TEAM, "plays", "warehouse", Target(restore_point="0-3"), None)


def test_one_rewind_per_output_at_a_time_and_the_next_one_a_generation_on(tmp_path: Path) -> None:
    replaying = a_rewind(output="clicks")
    store = FakeStore(rewound={"clicks": replaying})
    with pytest.raises(Conflict, match=replaying.id):
        rewinds(tmp_path, store).plan(TEAM, "plays", "clicks", Target(restore_point="0-3"), None)
    store.rewound["clicks"] = replaying.model_copy(update={"phase": "caught_up"})
    plan = rewinds(tmp_path, store).plan(TEAM, "plays", "clicks", Target(restore_point="0-3"), 7)
    assert plan.rewind.generation == 2 and plan.rewind.rate == 7


def test_an_output_being_backfilled_is_not_rewound_meanwhile(tmp_path: Path) -> None:
    running = Backfill(
        id="bf-0123456789ab",
        output="clicks",
        start=0,
        end=1000,
        rate=10,
        requested_at=NOW,
        by="team-a",
    )
    store = FakeStore(backfilled={"clicks": running})
    with pytest.raises(Conflict, match=running.id):
        rewinds(tmp_path, store).plan(TEAM, "plays", "clicks", Target(restore_point="0-3"), None)
    store.backfilled["clicks"] = running.model_copy(update={"phase": JobPhase.DONE})
    rewinds(tmp_path, store).plan(TEAM, "plays", "clicks", Target(restore_point="0-3"), None)


# West, the standby: its query (w0) first started after east's point 0-3, when a failover
# gave it writes; it committed twice since.
WEST_POINTS = [
    point(0, 1, {0: 25, 1: 20}, age=300, query="w0", cluster="west"),
    point(0, 0, {0: 10, 1: 5}, age=900, query="w0", cluster="west"),
    point(0, -1, {0: 0, 1: 0}, age=1000, query="w0", cluster="west"),
]


def two_clusters(tmp_path: Path, **west: object) -> Rewinds:
    store = FakeStore(points=sorted([*POINTS, *WEST_POINTS], key=lambda p: -p.time))
    standby = FakePositions(**{"end": {0: 30, 1: 30}, "first_at": NOW - 1000, **west})  # type: ignore[arg-type]
    return rewinds(tmp_path, store, "east,west", others={"west": standby})


def test_a_rewind_replays_every_fronting_cluster_from_the_same_moment(tmp_path: Path) -> None:
    planner = two_clusters(tmp_path)
    # A Hive output, to east's 0-3: west's query began after it, so all it wrote is undone.
    plan = planner.plan(TEAM, "plays", "warehouse", Target(restore_point="0-3"), None)
    rewind = plan.rewind
    assert rewind.start == {0: 30, 1: 30}
    assert rewind.clusters == {"west": Span(start={0: 0, 1: 0}, until={0: 30, 1: 30})}
    assert (
        rewind.total == 140 + 60
        and "200 events of the fronting topic on clusters east, west" in plan.effect
    )
    assert Replaced(query="w0", after=-1, cluster="west") in rewind.replaced
    assert {p.id for p in plan.dropped} == {"1-2", "1-start", *(p.id for p in WEST_POINTS)}
    assert planner.restore_points(TEAM, "plays", "warehouse") == POINTS  # home's are listed
    # A Kafka output, to east's 1-2 (60 s ago): west from its own newest point before then.
    plan = planner.plan(TEAM, "plays", "clicks", Target(restore_point="1-2"), None)
    assert plan.rewind.clusters["west"].start == {0: 25, 1: 20}
    assert {p.id for p in plan.dropped} == set()
    # A Hive output to a moment west has points on both sides of: its batches after it.
    later = FakeStore(points=[point(1, 4, {0: 95, 1: 85}, age=600, query="q1"), *WEST_POINTS])
    planner = rewinds(
        tmp_path, later, "east,west", others={"west": FakePositions(end={0: 30, 1: 30})}
    )
    plan = planner.plan(TEAM, "plays", "warehouse", Target(restore_point="1-4"), None)
    assert plan.rewind.clusters["west"].start == {0: 10, 1: 5}
    assert Replaced(query="w0", after=0, cluster="west") in plan.rewind.replaced
    # Rewound again to 0-3, once the first rewind (generation 1) started west's query again
    # where west began: from there, undoing all that query wrote.
    again = [
        point(1, 0, {0: 20, 1: 20}, age=10, query="w1", cluster="west"),
        point(1, -1, {0: 0, 1: 0}, age=30, query="w1", cluster="west"),
    ]
    planner = rewinds(
        tmp_path,
        FakeStore(points=[*again, *POINTS[2:]]),
        "east,west",
        others={"west": FakePositions(end={0: 30, 1: 30})},
    )
    plan = planner.plan(TEAM, "plays", "warehouse", Target(restore_point="0-3"), None)
    assert plan.rewind.clusters["west"].start == {0: 0, 1: 0}
    assert Replaced(query="w1", after=-1, cluster="west") in plan.rewind.replaced
    # A time: the first offset at or after it, on each cluster.
    when = datetime.fromtimestamp(NOW - 990, UTC)
    plan = two_clusters(tmp_path).plan(TEAM, "plays", "search", Target(to=when), None)
    assert plan.rewind.clusters["west"].start == {0: 10, 1: 10}


def test_a_rewind_is_refused_while_another_cluster_does_not_answer(tmp_path: Path) -> None:
    store = FakeStore()
    planner = rewinds(tmp_path, store, "east,west")  # west: no answer
    with pytest.raises(Unavailable, match="fronting cluster west did not answer"):
        planner.plan(TEAM, "plays", "search", Target(restore_point="0-3"), None)


def test_another_clusters_moment_holds_past_its_gaps_and_home_at_its_end(tmp_path: Path) -> None:
    # West's first failover's records are gone (its earliest is 10), and it took writes again
    # since: a time after the gap is no time before its retention.
    when = datetime.fromtimestamp(NOW - 995, UTC)
    plan = two_clusters(tmp_path, earliest={0: 10, 1: 10}).plan(
        TEAM, "plays", "search", Target(to=when), None
    )
    assert plan.rewind.clusters["west"].start == {0: 10, 1: 10}
    # Offsets at home's end (home idle: west took the writes): the moment is when the output
    # got there, and west replays from then.
    idle = FakeStore(points=[point(0, 9, {0: 100, 1: 100}, age=500), *POINTS])
    planner = rewinds(
        tmp_path,
        idle,
        "east,west",
        others={"west": FakePositions(end={0: 30, 1: 30}, first_at=NOW - 510)},
    )
    plan = planner.plan(TEAM, "plays", "clicks", Target(offsets={0: 100, 1: 100}), None)
    assert plan.rewind.clusters["west"].start == {0: 10, 1: 10} and plan.rewind.total == 40
    # A Hive point there that does not name its query is no place to start.
    nameless = [point(0, 1, {0: 25, 1: 20}, age=1900, query="", cluster="west"), *POINTS]
    planner = rewinds(
        tmp_path, FakeStore(points=nameless), "east,west", others={"west": FakePositions()}
    )
    with pytest.raises(Unprocessable, match="does not name its query"):
        planner.plan(TEAM, "plays", "warehouse", Target(restore_point="0-3"), None)
