"""The fleet's state machine on its own: a launcher that only records what it is asked, a clock
the test moves, a store in memory. No Redis, no process, no network (the fleet on the real
stack is tests/control/test_fleet.py)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from keystone.contracts.errors import KeystoneError, Unavailable
from keystone.contracts.registry import RouterPhase, RouterState, Unreadable
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec, load_spec
from keystone.control.fleet import (
    FAILED_AFTER,
    HEALTHY_AFTER,
    MAX_BACKOFF,
    Deployment,
    Fleet,
    fingerprint,
)
from keystone.control.sizing import CHANGE_EVERY_SECONDS, SAMPLE_SECONDS, Sizer

T0 = 1_000_000.0
STOP_TIMEOUT = 60.0


def spec(name: str = "alpha", **output: Any) -> StreamSpec:
    first = {"name": "o1", "sink": {"type": "kafka"}, **output}
    return load_spec({"name": name, "owner": "team-a", "outputs": [first]})


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class FakeLauncher:
    """Routers as records: a started one runs (and is not up) until the test says otherwise."""

    records: dict[str, Deployment] = field(default_factory=dict)
    running: set[int] = field(default_factory=set)  # pids whose process runs
    up_streams: set[str] = field(default_factory=set)
    errors: dict[str, str] = field(default_factory=dict)  # stream -> its log's last error
    exit_codes: dict[int, int | None] = field(default_factory=dict)
    failing: dict[str, Exception] = field(default_factory=dict)  # stream -> what start raises
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)  # what each start was sized for
    next_pid: int = 100

    def deployments(self) -> dict[str, Deployment]:
        return dict(self.records)

    def alive(self, deployed: Deployment) -> bool:
        return deployed.pid in self.running

    def start(
        self, spec: StreamSpec, *, port: int, fingerprint: str, started: float, sized_for: int
    ) -> Deployment:
        self.calls.append(("start", spec.name, port))
        self.sizes.append(sized_for)
        if spec.name in self.failing:
            raise self.failing[spec.name]
        self.next_pid += 1
        pid = self.next_pid
        deployed = Deployment(spec.name, pid, pid, port or 9000 + pid, fingerprint, started)
        self.records[spec.name] = deployed
        self.running.add(pid)
        return deployed

    def reap(self, deployed: Deployment) -> int | None:
        self.calls.append(("reap", deployed.stream, deployed.pid))
        self.records.pop(deployed.stream, None)
        return self.exit_codes.get(deployed.pid, 1)

    def stop(self, deployed: Deployment) -> None:
        self.calls.append(("stop", deployed.stream, deployed.pid))

    def kill(self, deployed: Deployment) -> None:
        self.calls.append(("kill", deployed.stream, deployed.pid))

    def up(self, deployed: Deployment) -> bool:
        return deployed.stream in self.up_streams

    def last_error(self, stream: str) -> str:
        return self.errors.get(stream, "")

    def remove_target(self, stream: str) -> None:
        self.calls.append(("remove_target", stream))

    def remove_checkpoints(self, stream: str, output: str | None = None) -> None:
        self.calls.append(("remove_checkpoints", stream, output))

    # The test's side: what happens to the processes.

    def die(self, stream: str, code: int | None = 1) -> int:
        pid = self.records[stream].pid
        self.running.discard(pid)
        self.exit_codes[pid] = code
        return pid

    def actions(self, *kinds: str) -> list[tuple[Any, ...]]:
        return [c for c in self.calls if not kinds or c[0] in kinds]


@dataclass
class FakeStore:
    """`control.store.Store`'s reads and its fleet records (`fleet`), in memory; states
    copied in and out as Redis would, so the fleet's changes count only once it puts them."""

    specs: dict[str, StreamSpec] = field(default_factory=dict)
    unreadable: list[Unreadable] = field(default_factory=list)
    states: dict[str, RouterState] = field(default_factory=dict)
    samples: dict[str, list[tuple[float, int]]] = field(default_factory=dict)

    def read_streams(self) -> tuple[list[StreamSpec], list[Unreadable]]:
        return list(self.specs.values()), list(self.unreadable)

    def router_states(self) -> dict[str, RouterState]:
        return copy.deepcopy(self.states)

    @property
    def fleet(self) -> FakeStore:
        return self

    def put_state(self, stream: str, state: RouterState) -> None:
        self.states[stream] = copy.deepcopy(state)

    def forget(self, stream: str) -> None:
        self.states.pop(stream, None)
        self.samples.pop(stream, None)

    def traffic(self, stream: str) -> list[tuple[float, int]]:
        return list(self.samples.get(stream, []))

    def put_traffic(self, stream: str, samples: list[tuple[float, int]]) -> None:
        self.samples[stream] = list(samples)

    def hold_lease(self, name: str, holder: str, seconds: float) -> bool:
        return True

    def release_lease(self, name: str, holder: str) -> None:
        pass


class FakeAlerts:
    """The alerts' publisher and control's silences (tests/alerts: the real ones)."""

    def sync(self, receivers: list) -> bool:
        return False

    def step(self, specs: list) -> None:
        pass


@dataclass
class FakeDashboards:
    synced: list[tuple[list[str], set[str] | None]] = field(default_factory=list)
    error: Exception | None = None

    def sync(self, specs: list[StreamSpec], keep: set[str] | None = None) -> list[str]:
        self.synced.append(([s.name for s in specs], keep))
        if self.error is not None:
            raise self.error
        return []


@dataclass
class FakeRecovery:
    stepped: list[str] = field(default_factory=list)
    forgotten: list[tuple[str, str | None]] = field(default_factory=list)

    def step(self, spec: StreamSpec) -> None:
        self.stepped.append(spec.name)

    def forget(self, stream: str, output: str | None = None) -> None:
        self.forgotten.append((stream, output))


@dataclass
class FakeShadows:
    stepped: list[tuple[str, bool]] = field(default_factory=list)  # stream, its router deployed

    def step(self, spec: StreamSpec, deployed: bool) -> None:
        self.stepped.append((spec.name, deployed))


@dataclass
class Topics:
    """Records in each fronting topic so far, as the test writes them."""

    counts: dict[str, int] = field(default_factory=dict)

    def __call__(self, topics: list[str]) -> dict[str, int]:
        return {t: self.counts.get(t, 0) for t in topics}


@dataclass
class World:
    fleet: Fleet
    launcher: FakeLauncher
    store: FakeStore
    dashboards: FakeDashboards
    clock: Clock
    recovery: FakeRecovery
    topics: Topics
    shadows: FakeShadows

    def state(self, stream: str = "alpha") -> RouterState:
        return self.store.states[stream]

    def running(self, stream: str = "alpha") -> None:
        """A started router that runs: up, one pass later."""
        self.launcher.up_streams.add(stream)
        self.clock.advance(1)
        self.fleet.reconcile()
        assert self.state(stream).state == RouterPhase.RUNNING


@pytest.fixture
def world(tmp_path: Path) -> World:
    return _world(tmp_path)


def _world(tmp_path: Path, **settings_given: str) -> World:
    settings = Settings(
        state_dir=tmp_path, router_stop_timeout_seconds=STOP_TIMEOUT, **settings_given
    )
    launcher, store, dashboards, clock = FakeLauncher(), FakeStore(), FakeDashboards(), Clock()
    recovery, topics, shadows = FakeRecovery(), Topics(), FakeShadows()
    fleet = Fleet(
        settings,
        store,  # type: ignore[arg-type]
        launcher=launcher,
        dashboards=dashboards,
        recovery=recovery,
        shadows=shadows,
        sizer=Sizer(settings, store, clock, sizes=topics),
        alerts=FakeAlerts(),
        quieting=FakeAlerts(),
        clock=clock,
    )
    return World(fleet, launcher, store, dashboards, clock, recovery, topics, shadows)


def test_a_new_stream_with_outputs_is_started_and_runs_once_it_is_up(world: World) -> None:
    world.store.specs["alpha"] = spec()
    world.fleet.reconcile()
    assert world.recovery.stepped == ["alpha"]  # its restore points and rewinds kept each pass
    # Its shadows too, told whether a router of it is deployed: one is, since this pass (a
    # router deployed may run a shadow's query, whose targets must wait for its word).
    assert world.shadows.stepped == [("alpha", True)]
    assert world.launcher.actions() == [("start", "alpha", 0)]  # no port yet: any free one
    state = world.state()
    deployed = world.launcher.records["alpha"]
    assert state.state == RouterPhase.STARTING
    assert (state.pid, state.port) == (deployed.pid, deployed.port)
    assert state.since == state.started == T0 == deployed.started
    assert state.fingerprint == deployed.fingerprint == fingerprint(spec())
    assert state.restarts == state.failures == 0
    assert set(state.extra["outputs"]) == {"o1"}
    assert world.dashboards.synced == [(["alpha"], set())]

    world.clock.advance(1)
    world.fleet.reconcile()  # not up yet
    assert world.state().state == RouterPhase.STARTING
    world.running()
    assert world.state().since == T0 + 2
    assert world.launcher.actions() == [("start", "alpha", 0)]  # started once


def test_a_router_found_running_is_adopted_not_started_again(world: World) -> None:
    world.store.specs["alpha"] = spec()
    deployed = Deployment("alpha", 42, 42, 9042, fingerprint(spec()), T0 - 10)
    world.launcher.records["alpha"] = deployed
    world.launcher.running.add(42)
    world.launcher.up_streams.add("alpha")
    world.fleet.reconcile()
    assert world.launcher.actions() == []
    assert world.state().state == RouterPhase.RUNNING


def test_a_stream_without_outputs_gets_no_router(world: World) -> None:
    world.store.specs["alpha"] = load_spec({"name": "alpha", "owner": "team-a"})
    world.fleet.reconcile()
    world.clock.advance(1)
    world.fleet.reconcile()
    assert world.launcher.actions() == []
    assert world.store.states == {}
    assert world.dashboards.synced[-1] == (["alpha"], set())  # its dashboard all the same


def test_a_router_that_dies_is_restarted_with_exponential_backoff_then_failed(
    world: World,
) -> None:
    world.store.specs["alpha"] = spec()
    world.fleet.reconcile()
    world.launcher.errors["alpha"] = "java.lang.OutOfMemoryError: Java heap space"
    for death in range(1, FAILED_AFTER + 3):
        world.clock.advance(5)
        pid = world.launcher.die("alpha", code=1)
        world.fleet.reconcile()
        delay = min(MAX_BACKOFF, 2.0 ** (death - 1))  # 1 s, 2 s, 4 s...
        state = world.state()
        assert world.launcher.actions()[-1] == ("reap", "alpha", pid)
        assert state.failures == death
        assert state.state == (
            RouterPhase.FAILED if death >= FAILED_AFTER else RouterPhase.RESTARTING
        )
        assert state.retry_at == world.clock.now + delay
        assert state.last_error == "exited with 1: java.lang.OutOfMemoryError: Java heap space"
        assert state.restarts == death - 1

        world.clock.advance(delay - 0.5)
        world.fleet.reconcile()  # not yet
        assert world.launcher.actions()[-1][0] == "reap"
        world.clock.advance(0.5)
        world.fleet.reconcile()  # failed or not, it is started again
        assert world.launcher.actions()[-1] == ("start", "alpha", state.port)  # its port again
        assert world.state().restarts == death
        assert world.state().state == RouterPhase.STARTING
        assert world.state().failures == death  # until it has run a while


def test_the_backoff_stops_growing_at_its_cap(world: World) -> None:
    world.store.specs["alpha"] = spec()
    world.store.states["alpha"] = RouterState(state=RouterPhase.FAILED, failures=20)
    world.fleet.reconcile()
    world.launcher.die("alpha", code=None)  # adopted: its exit code cannot be known
    world.fleet.reconcile()
    state = world.state()
    assert state.failures == 21 and state.state == RouterPhase.FAILED
    assert state.retry_at == T0 + MAX_BACKOFF
    assert state.last_error == "its process ended"


def test_a_router_healthy_for_a_while_has_its_failures_forgotten(world: World) -> None:
    world.store.specs["alpha"] = spec()
    world.store.states["alpha"] = RouterState(
        state=RouterPhase.FAILED, failures=FAILED_AFTER, restarts=5, last_error="exited with 1"
    )
    world.fleet.reconcile()
    world.running()
    assert world.state().failures == FAILED_AFTER  # up, but not for long yet
    assert world.state().last_error == "exited with 1"

    world.clock.advance(HEALTHY_AFTER)
    world.fleet.reconcile()
    state = world.state()
    assert (state.failures, state.last_error, state.restarts) == (0, "", 6)

    # A death after that is a first failure again: the shortest backoff.
    world.launcher.die("alpha")
    world.fleet.reconcile()
    assert world.state().failures == 1
    assert world.state().state == RouterPhase.RESTARTING
    assert world.state().retry_at == world.clock.now + 1


def test_a_logged_error_is_shown_and_keeps_the_failures(world: World) -> None:
    world.store.specs["alpha"] = spec()
    world.store.states["alpha"] = RouterState(failures=2)
    world.fleet.reconcile()
    world.launcher.errors["alpha"] = "ERROR output o1: sink unreachable"
    world.running()
    world.clock.advance(HEALTHY_AFTER + 1)
    world.fleet.reconcile()
    assert world.state().last_error == "ERROR output o1: sink unreachable"
    assert world.state().failures == 2

    # Having run that long, its death is a first failure again all the same.
    world.launcher.die("alpha")
    world.fleet.reconcile()
    assert world.state().failures == 1
    assert world.state().retry_at == world.clock.now + 1


def test_a_changed_spec_stops_the_old_router_then_starts_the_new_one(world: World) -> None:
    world.store.specs["alpha"] = spec()
    world.store.states["alpha"] = RouterState(retry_at=T0 - 5)  # from an earlier death
    world.fleet.reconcile()
    world.running()
    old = world.launcher.records["alpha"]
    changed = spec(filter="kind = 'b'")
    world.store.specs["alpha"] = changed

    world.clock.advance(1)
    world.fleet.reconcile()
    assert world.state().state == RouterPhase.STOPPING
    assert world.state().since == world.clock.now
    for _ in range(3):  # it takes its time: asked once, not killed before the timeout
        world.clock.advance(5)
        world.fleet.reconcile()
    assert world.launcher.actions("stop", "kill") == [("stop", "alpha", old.pid)]
    assert world.state().state == RouterPhase.STOPPING

    world.launcher.die("alpha", code=0)
    world.clock.advance(1)
    world.fleet.reconcile()  # reaped and started again in the same pass
    new = world.launcher.records["alpha"]
    assert world.launcher.actions()[-2:] == [
        ("reap", "alpha", old.pid),
        ("start", "alpha", old.port),
    ]
    state = world.state()
    assert state.state == RouterPhase.STARTING
    assert state.fingerprint == new.fingerprint == fingerprint(changed) != old.fingerprint
    assert (state.pid, state.restarts, state.failures) == (new.pid, 0, 0)  # not a failure
    assert state.retry_at == 0.0
    assert world.launcher.actions("remove_checkpoints") == []  # the same sink goes on


def test_an_output_whose_sink_changed_starts_afresh(world: World) -> None:
    world.store.specs["alpha"] = spec()
    world.fleet.reconcile()
    world.running()
    world.store.specs["alpha"] = spec(sink={"type": "elasticsearch"})
    world.fleet.reconcile()
    world.launcher.die("alpha", code=0)
    world.fleet.reconcile()
    assert world.launcher.actions("remove_checkpoints", "start")[-2:] == [
        ("remove_checkpoints", "alpha", "o1"),
        ("start", "alpha", world.state().port),
    ]
    assert world.recovery.forgotten == [("alpha", "o1")]  # its restore points and rewind too


def test_a_router_that_does_not_stop_in_time_is_killed(world: World) -> None:
    world.store.specs["alpha"] = spec()
    world.fleet.reconcile()
    world.running()
    pid = world.launcher.records["alpha"].pid
    world.store.specs["alpha"] = spec(filter="kind = 'b'")
    world.fleet.reconcile()
    world.clock.advance(STOP_TIMEOUT)
    world.fleet.reconcile()  # the timeout, not more
    assert world.launcher.actions("stop", "kill") == [("stop", "alpha", pid)]
    world.clock.advance(1)
    world.fleet.reconcile()
    assert world.launcher.actions("stop", "kill") == [
        ("stop", "alpha", pid),
        ("kill", "alpha", pid),
    ]
    assert world.state().state == RouterPhase.STOPPING

    world.launcher.die("alpha", code=-9)
    world.fleet.reconcile()
    assert world.launcher.actions()[-2:-1] == [("reap", "alpha", pid)]
    assert world.state().state == RouterPhase.STARTING
    assert world.state().restarts == 0


@pytest.mark.parametrize("gone", ["deleted", "without outputs"])
def test_a_deleted_streams_router_is_stopped_then_undeployed(world: World, gone: str) -> None:
    world.store.specs["alpha"] = spec()
    world.fleet.reconcile()
    world.running()
    pid = world.launcher.records["alpha"].pid
    if gone == "deleted":
        del world.store.specs["alpha"]
    else:
        world.store.specs["alpha"] = load_spec({"name": "alpha", "owner": "team-a"})

    world.clock.advance(1)
    world.fleet.reconcile()
    assert world.launcher.actions()[-1] == ("stop", "alpha", pid)
    assert world.state().state == RouterPhase.STOPPING  # still shown while it stops
    world.clock.advance(1)
    world.fleet.reconcile()
    assert world.launcher.actions()[-1] == ("stop", "alpha", pid)  # not asked twice

    world.launcher.die("alpha", code=0)
    world.fleet.reconcile()
    assert world.launcher.actions()[-4:] == [
        ("stop", "alpha", pid),
        ("reap", "alpha", pid),
        ("remove_target", "alpha"),
        ("remove_checkpoints", "alpha", None),
    ]
    assert world.recovery.forgotten == [("alpha", None)]
    assert world.store.states == {}
    assert world.launcher.records == {}

    calls = len(world.launcher.calls)
    world.fleet.reconcile()  # nothing left to do
    assert len(world.launcher.calls) == calls
    assert world.launcher.actions("start") == [("start", "alpha", 0)]


def test_a_dead_router_of_a_deleted_stream_is_undeployed_at_once(world: World) -> None:
    world.store.specs["alpha"] = spec()
    world.fleet.reconcile()
    pid = world.launcher.die("alpha")
    del world.store.specs["alpha"]
    world.fleet.reconcile()
    assert world.launcher.actions()[1:] == [
        ("reap", "alpha", pid),
        ("remove_target", "alpha"),
        ("remove_checkpoints", "alpha", None),
    ]
    assert world.store.states == {}


def test_an_unreadable_stream_is_left_alone(world: World) -> None:
    world.store.specs["alpha"] = spec()
    world.store.specs["beta"] = spec("beta")
    world.fleet.reconcile()
    world.running("alpha")
    before = copy.deepcopy(world.store.states["alpha"])
    calls = len(world.launcher.calls)

    del world.store.specs["alpha"]
    world.store.unreadable = [Unreadable("alpha", "not JSON")]
    for _ in range(3):
        world.clock.advance(STOP_TIMEOUT)
        world.fleet.reconcile()
    world.launcher.die("alpha")  # even dead: it is the admin's to replace or delete
    world.fleet.reconcile()

    assert [c for c in world.launcher.calls[calls:] if c[1] == "alpha"] == []
    assert world.store.states["alpha"] == before
    assert world.dashboards.synced[-1] == (["beta"], {"alpha"})  # its files kept too
    assert world.store.states["beta"].state == RouterPhase.STARTING  # the others go on


@pytest.mark.parametrize(
    "error",
    [RuntimeError("a bug"), Unavailable("Redis is away", retry_after=2)],
    ids=["a bug", "a KeystoneError"],
)
def test_one_streams_trouble_does_not_hold_back_another(world: World, error: Exception) -> None:
    world.store.specs["alpha"] = spec()  # stepped first
    world.store.specs["beta"] = spec("beta")
    world.launcher.failing["alpha"] = error
    world.fleet.reconcile()
    assert world.launcher.actions("start") == [("start", "alpha", 0), ("start", "beta", 0)]
    assert "alpha" not in world.store.states
    assert world.store.states["beta"].state == RouterPhase.STARTING

    del world.launcher.failing["alpha"]
    world.clock.advance(1)
    world.fleet.reconcile()  # tried again on the next pass
    assert world.state("alpha").state == RouterPhase.STARTING
    assert len(world.launcher.actions("start")) == 3


def test_dashboards_that_fail_to_publish_do_not_hold_back_the_routers(world: World) -> None:
    world.dashboards.error = OSError("disk full")
    world.store.specs["alpha"] = spec()
    world.fleet.reconcile()
    assert world.state().state == RouterPhase.STARTING


def test_a_store_error_in_a_pass_is_left_to_the_loop(world: World) -> None:
    def away() -> tuple[list[StreamSpec], list[Unreadable]]:
        raise Unavailable("Redis is away", retry_after=2)

    world.store.read_streams = away  # type: ignore[method-assign]
    with pytest.raises(KeystoneError):
        world.fleet.reconcile()  # the thread's loop logs it and tries again
    assert world.launcher.calls == []


def _traffic(world: World, per_second: float, seconds: float) -> None:
    """The stream's input at `per_second` for `seconds`, the fleet passing every second."""
    topic = "keystone.alpha"
    for _ in range(int(seconds)):
        world.topics.counts[topic] = world.topics.counts.get(topic, 0) + int(per_second)
        world.clock.advance(1)
        world.fleet.reconcile()


def test_a_local_router_whose_traffic_rises_tenfold_is_resized_once_as_it_runs(
    world: World,
) -> None:
    world.store.specs["alpha"] = spec()
    world.fleet.reconcile()
    world.running()
    _traffic(world, 500, 60)  # 500/s with headroom: the smallest size does
    assert world.state().sized_for == 1_000 and world.launcher.sizes == [1_000]
    assert world.state().rate_per_second == 500
    _traffic(world, 5_000, 3 * SAMPLE_SECONDS)  # tenfold: 7,500 with headroom
    state = world.state()
    assert (state.sized_for, state.resizes, state.resized_at > T0) == (8_000, 1, True)
    # Its record says the new size, which the router reads as it runs: not started again.
    assert world.launcher.actions("stop") == [] and world.launcher.sizes == [1_000]
    assert state.state == RouterPhase.RUNNING and state.fingerprint == fingerprint(spec(), 0)
    # Twenty times more, within ten minutes of that change: not resized again yet.
    _traffic(world, 100_000, 60)
    assert (world.state().sized_for, world.state().resizes) == (8_000, 1)
    # Past the interval, up again at once; down only once the last hour's peak allows.
    _traffic(world, 100_000, CHANGE_EVERY_SECONDS)
    assert (world.state().sized_for, world.state().resizes) == (64_000, 2)  # the spec's most
    assert world.launcher.actions("stop") == []


def test_a_router_on_a_cluster_is_redeployed_when_resized(tmp_path: Path) -> None:
    world = _world(tmp_path, spark_cluster="standalone")  # its cores are fixed as it starts
    world.store.specs["alpha"] = spec()
    world.fleet.reconcile()
    world.running()
    _traffic(world, 500, 60)
    assert world.launcher.sizes == [1_000]
    _traffic(world, 5_000, 3 * SAMPLE_SECONDS)
    assert (world.state().sized_for, world.state().resizes) == (8_000, 1)
    assert world.launcher.actions("stop") == [("stop", "alpha", 101)]  # redeployed with it
    world.launcher.die("alpha", 0)
    _traffic(world, 5_000, 5)
    assert world.launcher.sizes == [1_000, 8_000]
    assert world.state().fingerprint == fingerprint(spec(), 8_000)


def test_the_spec_bounds_the_size(world: World) -> None:
    world.store.specs["alpha"] = load_spec(
        {
            "name": "alpha",
            "owner": "team-a",
            "outputs": [{"name": "o1", "sink": {"type": "kafka"}}],
            "sizing": {"min_events_per_second": 4_000, "max_events_per_second": 16_000},
        }
    )
    world.fleet.reconcile()
    assert world.launcher.sizes == [4_000]  # the least it may have, quiet as it is
