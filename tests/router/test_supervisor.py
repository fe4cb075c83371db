"""The router's supervisor, with fake queries and a fake clock: a failed query is started again
after a backoff, reset once it had run well; a rewound or held one is stopped and started in its
new plan; the others go on; every query stops at the end."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence

from keystone.contracts.backoff import Backoff
from keystone.router.supervisor import Query, Supervisor, Together


class FakeQuery:
    def __init__(self, name: str, stopped: list[str]) -> None:
        self.name = name
        self.stopped = stopped  # the names of the queries stopped, in order
        self.isActive = True
        self.error: Exception | None = None
        self.stops = 0
        self.refuse_stop = False
        self.hangs = 0  # stops that time out, the query still active

    def exception(self) -> object | None:
        return self.error

    def stop(self) -> None:
        self.stops += 1
        self.stopped.append(self.name)
        if self.hangs:
            self.hangs -= 1
            raise TimeoutError("the batch did not end in the stop's timeout")
        self.isActive = False
        if self.refuse_stop:
            raise RuntimeError("the JVM did not answer")

    def fail(self, why: str = "sink away") -> None:
        self.isActive, self.error = False, RuntimeError(f"{why}\n\tat the stack trace")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class FakePlans:
    """The outputs' rewinds as the supervisor sees them: a plan per name, and held names."""

    def __init__(self) -> None:
        self.ready = True
        self.held: set[str] = set()
        self.plans: dict[str, object] = {}
        self.reads = 0

    def read(self) -> None:
        self.reads += 1

    def plan(self, name: str) -> object:
        return self.plans.get(name)


def one_after_another(actions: Sequence[Callable[[], None]]) -> None:
    for action in actions:
        action()


class Harness:
    """Queries `a` and `b` under a supervisor; `refuse[name]` starts of a name fail."""

    def __init__(self, names: tuple[str, ...] = ("a", "b")) -> None:
        self.clock = Clock()
        self.plans = FakePlans()
        self.started: dict[str, list[FakeQuery]] = {name: [] for name in names}
        self.attempts: dict[str, list[float]] = {name: [] for name in names}
        self.order: list[str] = []  # every attempt to start, by name
        self.refuse: dict[str, int] = dict.fromkeys(names, 0)
        self.reports: list[dict[str, bool]] = []
        self.stopped: list[str] = []
        # The queries wanted, asked each tick: a test may add one (a shadow) or take one away.
        self.wanted = {name: self._starter(name) for name in names}
        self.supervisor = Supervisor(
            lambda: self.wanted,
            self.plans,
            self.reports.append,
            backoff=Backoff(first=1.0, factor=2.0, most=60.0),
            clock=self.clock,
            together=one_after_another,  # in the order looked at; at once: below
        )

    def _starter(self, name: str) -> Callable[[], Query]:
        def start() -> Query:
            self.attempts[name].append(self.clock.now)
            self.order.append(name)
            if self.refuse[name]:
                self.refuse[name] -= 1
                raise ConnectionError("Kafka away")
            query = FakeQuery(name, self.stopped)
            self.started[name].append(query)
            return query

        return start

    def last(self, name: str) -> FakeQuery:
        return self.started[name][-1]

    def tick(self, seconds: float = 1.0) -> None:
        """One tick, `seconds` after the last."""
        self.clock.now += seconds
        self.supervisor.tick()

    def ticks(self, seconds: int) -> None:
        for _ in range(seconds):
            self.tick()


def test_every_query_starts_in_order_and_is_reported_running() -> None:
    h = Harness()
    h.tick()
    assert h.order == ["a", "b"]
    assert h.reports == [{"a": True, "b": True}]
    assert h.plans.reads == 1  # the plans, read every tick before anything else
    h.ticks(5)
    assert len(h.started["a"]) == len(h.started["b"]) == 1  # running: left alone


def test_a_query_wanted_later_starts_and_one_no_longer_wanted_is_stopped_and_forgotten() -> None:
    h = Harness(("a",))
    h.tick()
    h.started["shadow"], h.attempts["shadow"], h.refuse["shadow"] = [], [], 0
    h.wanted["shadow"] = h._starter("shadow")
    h.tick()
    assert h.order == ["a", "shadow"] and h.reports[-1] == {"a": True, "shadow": True}
    del h.wanted["shadow"]
    h.tick()
    assert h.stopped == ["shadow"] and not h.last("shadow").isActive
    assert h.reports[-1] == {"a": True}
    assert not h.supervisor.draining
    h.ticks(3)
    assert len(h.started["shadow"]) == 1 and len(h.started["a"]) == 1


def test_a_query_no_longer_wanted_that_does_not_stop_is_asked_again_and_reported_running() -> None:
    """A stop that times out leaves a batch under way: the query is still said to run (a
    shadow's targets must not go from under it), and is stopped again each tick until it has."""
    h = Harness(("a",))
    h.started["shadow"], h.attempts["shadow"], h.refuse["shadow"] = [], [], 0
    h.wanted["shadow"] = h._starter("shadow")
    h.tick()
    h.last("shadow").hangs = 2
    del h.wanted["shadow"]
    h.tick()
    assert h.reports[-1] == {"a": True, "shadow": True} and h.last("shadow").isActive
    h.tick()
    assert h.reports[-1] == {"a": True, "shadow": True}
    h.tick()  # the third stop ends it
    assert h.reports[-1] == {"a": True} and h.last("shadow").stops == 3
    h.ticks(2)
    assert h.last("shadow").stops == 3 and len(h.started["shadow"]) == 1


def test_a_query_that_cannot_start_backs_off_doubling_to_the_most_the_others_going_on() -> None:
    h = Harness()
    h.refuse["a"] = 1_000
    h.ticks(200)
    t0 = h.attempts["a"][0]
    waits = [t - t0 for t in h.attempts["a"]]
    assert waits == [0, 1, 3, 7, 15, 31, 63, 123, 183]  # 1, 2, 4 ... 32, then 60 s apart
    assert len(h.started["b"]) == 1 and h.last("b").isActive
    assert h.reports[-1] == {"a": False, "b": True}


def test_a_failed_query_starts_again_after_its_backoff() -> None:
    h = Harness()
    h.tick()
    h.last("a").fail()
    h.tick()  # seen failed: 1 s to wait
    assert h.reports[-1] == {"a": False, "b": True} and len(h.started["a"]) == 1
    h.tick(0.5)
    assert len(h.started["a"]) == 1
    h.tick(0.5)
    assert len(h.started["a"]) == 2 and h.reports[-1] == {"a": True, "b": True}
    h.last("a").fail()
    h.tick()
    h.tick()
    assert len(h.started["a"]) == 2  # failing again soon after: 2 s this time
    h.tick()
    assert len(h.started["a"]) == 3


def test_a_start_does_not_reset_the_backoff_only_a_run_longer_than_the_most_does() -> None:
    h = Harness(("a",))
    h.refuse["a"] = 3  # waits of 1, 2 and 4 s
    h.ticks(8)
    assert len(h.started["a"]) == 1
    h.ticks(59)  # seen failed 60 s after it started, not more: its fourth failure in a row
    h.last("a").fail()
    h.tick()
    failed_at = h.clock.now
    h.ticks(10)
    assert h.attempts["a"][-1] == failed_at + 8
    h.ticks(61)  # seen failed 64 s after it started: counted from its first delay again
    h.last("a").fail()
    h.tick()
    failed_at = h.clock.now
    h.tick()
    assert h.attempts["a"][-1] == failed_at + 1


def test_a_query_whose_plan_changes_is_stopped_and_started_again_the_next_tick() -> None:
    h = Harness()
    h.plans.plans["a"] = (1, True)  # rewound, replaying
    h.tick()
    first = h.last("a")
    h.plans.plans["a"] = (1, False)  # caught up
    h.tick()
    assert first.stops == 1 and len(h.started["a"]) == 1  # stopped, not started in that tick
    assert h.reports[-1] == {"a": False, "b": True}
    h.tick()
    assert len(h.started["a"]) == 2 and h.last("a").stops == 0
    h.ticks(3)
    assert len(h.started["a"]) == 2  # in its new plan: left alone
    assert len(h.started["b"]) == 1 and h.last("b").stops == 0  # the others go on
    # A stop is no failure: a failure afterwards waits the first delay.
    h.last("a").fail()
    h.tick()
    h.tick()
    assert len(h.started["a"]) == 3


def test_a_query_that_does_not_stop_cleanly_for_its_new_plan_starts_again_all_the_same() -> None:
    h = Harness()
    h.tick()
    h.last("a").refuse_stop = True
    h.plans.plans["a"] = (2, True)
    h.tick()
    h.tick()
    assert len(h.started["a"]) == 2


def test_a_held_query_is_stopped_and_not_started_until_it_is_no_longer_held() -> None:
    h = Harness()
    h.tick()
    h.plans.held = {"a"}
    h.tick()
    assert h.last("a").stops == 1
    h.ticks(100)
    assert len(h.started["a"]) == 1 and h.attempts["a"] == [h.attempts["a"][0]]
    h.plans.held = set()
    h.tick()
    assert len(h.started["a"]) == 2


def test_a_held_query_that_fails_is_not_started_again_while_held() -> None:
    h = Harness()
    h.tick()
    h.last("a").fail()
    h.plans.held = {"a"}
    h.ticks(10)
    assert len(h.attempts["a"]) == 1
    h.plans.held = set()
    h.tick()
    assert len(h.started["a"]) == 2


class ScriptedStop(threading.Event):
    """`stop` for `Supervisor.run`: each wait moves the clock on a second and runs the next
    step of the script; set once the script has run out."""

    def __init__(self, clock: Clock, script: list[object]) -> None:
        super().__init__()
        self.clock = clock
        self.script = script
        self.waits = 0

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout == 1.0
        self.waits += 1
        self.clock.now += timeout
        if self.script:
            step = self.script.pop(0)
            if callable(step):
                step()
        else:
            self.set()
        return self.is_set()


def test_run_waits_for_the_plans_then_supervises_and_stops_every_query_in_the_order_started() -> (
    None
):
    h = Harness()
    h.plans.ready = False  # t = 1000

    def ready() -> None:
        h.plans.ready = True

    def fail_a() -> None:
        h.last("a").fail()

    # A wait a second: not ready (1001), ready (1002, the first tick), a fails (1003), three
    # more ticks (1004 to 1006), then stopped.
    stop = ScriptedStop(h.clock, [None, ready, fail_a, None, None, None])
    h.supervisor.run(stop)
    assert h.attempts == {"a": [1002, 1004], "b": [1002]}  # none before the plans were read
    assert h.plans.reads == 2 + 5  # waiting, then every tick
    both, only_b = {"a": True, "b": True}, {"a": False, "b": True}
    assert h.reports == [both, only_b, both, both, both]
    # Every query stopped at the end, in the order it last started: a started again after b.
    assert h.stopped == ["b", "a"]
    assert not h.last("a").isActive and not h.last("b").isActive


def test_run_starts_nothing_when_stopped_before_the_plans_are_read() -> None:
    h = Harness()
    h.plans.ready = False
    h.supervisor.run(ScriptedStop(h.clock, []))
    assert h.attempts == {"a": [], "b": []} and h.reports == [] and h.stopped == []


class Meeting(FakeQuery):
    """A query whose stop waits for the other query's stop to begin: only stops run at once
    end."""

    def __init__(self, name: str, stopped: list[str], barrier: threading.Barrier) -> None:
        super().__init__(name, stopped)
        self.barrier = barrier

    def stop(self) -> None:
        self.barrier.wait()
        super().stop()


def test_a_ticks_stops_and_then_its_starts_run_at_once_and_so_do_the_last_stops() -> None:
    """Each of two starts, then each of two stops, waits for the other to begin (as a resize's
    wait on their batches and sources): one after another, the first would wait forever (here
    until the barrier's timeout breaks it, and the start or stop fails)."""
    starts, stops = threading.Barrier(2, timeout=10), threading.Barrier(2, timeout=10)
    stopped: list[str] = []
    plans = FakePlans()

    def starter(name: str) -> Callable[[], Query]:
        def start() -> Query:
            starts.wait()
            return Meeting(name, stopped, stops)

        return start

    reports: list[dict[str, bool]] = []
    together = Together(2)  # what a supervisor makes itself when given none
    wanted = {n: starter(n) for n in ("a", "b")}
    supervisor = Supervisor(lambda: wanted, plans, reports.append, together=together)
    with contextlib.closing(together):
        supervisor.tick()
        assert reports == [{"a": True, "b": True}]
        plans.plans = {"a": 2, "b": 2}
        starts.reset()
        supervisor.tick()
        assert sorted(stopped) == ["a", "b"] and reports[-1] == {"a": False, "b": False}
        supervisor.tick()
        assert reports[-1] == {"a": True, "b": True}
        stops.reset()
        supervisor.stop_all()  # at the end too
        assert sorted(stopped) == ["a", "a", "b", "b"]
