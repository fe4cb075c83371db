"""The fleet leader's automatic failover and failback (`control.fronting.FrontingWatch`): the
clusters' answers, the store and the clock given here; against real clusters, with a broker
killed: tests/cluster/test_nodes.py."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from keystone.contracts.fronting import Active
from keystone.contracts.settings import Settings
from keystone.control import fronting
from keystone.control.fronting import FrontingWatch


@dataclass
class Records:
    active: Active
    switches: list[tuple[str, str | None, str]] = field(default_factory=list)

    def switch(self, settings, who, to, stream, reason, now, only_from=None):
        current = self.active.cluster if stream is None else self.active.of(stream)
        if current == to or (only_from is not None and current != only_from):
            return None
        before = self.active
        if stream is None:
            self.active = before.model_copy(update={"cluster": to, "since": now, "reason": reason})
        else:
            streams = {**before.streams, stream: to}
            self.active = before.model_copy(update={"streams": streams, "since": now})
        self.switches.append((to, stream, reason))
        return before, self.active


class Store:
    def __init__(self) -> None:
        self.fronting_records = Records(Active(cluster="east"))

    def fronting(self, settings: Settings) -> Active:
        return self.fronting_records.active

    def streams(self) -> list:
        return []


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch):
    lost: set[str] = set()
    monkeypatch.setattr(fronting, "admin_client", lambda settings, cluster: cluster.name)
    monkeypatch.setattr(
        fronting, "probe", lambda admin, timeout, streams: ("gone" if admin in lost else None, [])
    )
    clock = [1000.0]
    store = Store()

    def watch(**settings: object) -> FrontingWatch:
        configured = Settings(fronting_clusters="east,west,south", **settings)
        return FrontingWatch(configured, store, lambda: clock[0])  # type: ignore[arg-type]

    return watch, store, lost, clock


def test_a_cluster_lost_for_long_enough_loses_the_writes_to_the_first_that_answers(world) -> None:
    watch, store, lost, clock = world
    fleet = watch(fronting_failover_after_seconds=3.0)
    fleet.step()
    lost.update({"east", "west"})
    for _ in range(3):  # lost at 1000, 1001, 1002: not yet
        fleet.step()
        clock[0] += 1
    assert store.fronting_records.switches == []
    fleet.step()  # 1003: three seconds lost
    assert store.fronting_records.switches == [("south", None, "unreachable")]


def test_no_switch_within_the_hold_of_the_last_one_and_no_failback_unless_configured(
    world,
) -> None:
    watch, store, lost, clock = world
    fleet = watch(fronting_failover_after_seconds=0.0, fronting_switch_hold_seconds=60.0)
    lost.add("east")
    fleet.step()
    assert store.fronting_records.active.cluster == "west"
    lost.clear()
    lost.add("west")  # west flaps right after: held
    clock[0] += 30
    fleet.step()
    assert store.fronting_records.active.cluster == "west"
    clock[0] += 31  # past the hold: west is lost, east answers
    fleet.step()
    assert store.fronting_records.active.cluster == "east"
    assert [s[2] for s in store.fronting_records.switches] == ["unreachable", "unreachable"]


def test_an_automatic_failback_once_home_has_answered_long_enough(world) -> None:
    watch, store, lost, clock = world
    store.fronting_records.active = Active(cluster="west", since=clock[0])
    fleet = watch(
        fronting_auto_failback=True,
        fronting_failback_after_seconds=120.0,
        fronting_switch_hold_seconds=60.0,
    )

    def steps(seconds: int) -> None:  # the leader's pace: a step a second
        for _ in range(seconds):
            clock[0] += 1
            fleet.step()

    lost.add("east")
    steps(100)
    lost.clear()
    steps(120)  # home answers from the first of these: not yet for 120 s
    assert store.fronting_records.switches == []
    steps(1)
    assert store.fronting_records.switches == [("east", None, "recovered")]
    store.fronting_records.active = Active(cluster="west", since=0.0)
    watch().step()  # not configured: stays
    assert store.fronting_records.active.cluster == "west"


def test_a_watch_that_was_not_leading_forgets_what_it_saw(world) -> None:
    """A leader again after a while must see a cluster lost for the whole wait itself."""
    watch, store, lost, clock = world
    fleet = watch(fronting_failover_after_seconds=3.0)
    lost.add("east")
    fleet.step()  # east seen lost at 1000
    clock[0] += 60  # then another process led the fleet
    fleet.step()
    assert store.fronting_records.switches == []  # lost for 0 s as far as it knows
    for _ in range(3):
        clock[0] += 1
        fleet.step()
    assert store.fronting_records.switches == [("west", None, "unreachable")]


def test_every_stream_on_a_lost_cluster_moves_in_the_same_step(world) -> None:
    watch, store, lost, _ = world
    store.fronting_records.active = Active(cluster="east", streams={"a": "west", "b": "east"})
    fleet = watch(fronting_failover_after_seconds=0.0)
    lost.add("east")
    fleet.step()
    assert ("west", None, "unreachable") in store.fronting_records.switches
    assert store.fronting_records.active.of("b") != "east"


def test_a_stream_switched_alone_fails_over_from_its_own_lost_cluster(world) -> None:
    watch, store, lost, _ = world
    store.fronting_records.active = Active(cluster="east", streams={"plays": "west"})
    fleet = watch(fronting_failover_after_seconds=0.0)
    lost.add("west")
    fleet.step()
    assert store.fronting_records.switches == [("east", "plays", "unreachable")]


def test_nowhere_to_go_changes_nothing(world) -> None:
    watch, store, lost, _ = world
    lost.update({"east", "west", "south"})
    fleet = watch(fronting_failover_after_seconds=0.0)
    fleet.step()
    assert store.fronting_records.switches == []
