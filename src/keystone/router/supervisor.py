"""The router's supervisor: keeps its named streaming queries running until told to stop.

Every second it reads the queries' plans (`Plans`: for the router, the outputs' rewinds and its
size) and asks which queries are wanted (`starts`: the router's, and one per shadow running),
then looks at each query in turn:

- one that stopped by itself failed: it is logged and started again after a backoff
  (`contracts.backoff.Backoff`: 1 s doubling to 60 s), from the first delay again when it had
  run longer than the longest wait (a start alone does not count as running well);
- one whose plan changed (a rewind started, or caught up; the router resized, for a query in
  micro-batches), or that is held, is stopped at once and, unless held, started again a second
  later in its new plan;
- one that is not running is started when its wait is over; one that cannot start (a sink's
  `prepare` refused, Kafka away...) backs off as a failed one does;
- one no longer wanted (a shadow that ended) is stopped at once, and forgotten once it is no
  longer active (a stop that timed out is asked again each tick, and reported running till then).

A tick's stops run at once, and then its starts (`Together`); the others go on meanwhile. Then
it reports which are running (`report`). When told to stop, it stops every query running, at
once. No Spark here: a query is anything that can say whether it is active, why it stopped,
and be stopped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from keystone.contracts.backoff import Backoff

log = logging.getLogger(__name__)

BACKOFF = Backoff(first=1.0, factor=2.0, most=60.0)
TICK_SECONDS = 1.0  # how often plans are read and queries looked at


class Query(Protocol):
    """What the supervisor needs of a running query (a `pyspark` `StreamingQuery`)."""

    @property
    def isActive(self) -> bool: ...  # Spark's name

    def exception(self) -> object | None: ...

    def stop(self) -> None: ...


class Plans(Protocol):
    """Where the queries' plans come from, read once a tick (the router's `RouterWatch`)."""

    @property
    def ready(self) -> bool:
        """Read at least once: no query starts before, or it could start in the wrong plan."""
        ...

    @property
    def held(self) -> set[str]:
        """Queries that must not run."""
        ...

    def read(self) -> None: ...

    def plan(self, name: str) -> object:
        """What the query runs as; a change starts it again."""
        ...


@dataclass
class _Supervised:
    """One query's state between ticks."""

    start: Callable[[], Query]
    query: Query | None = None  # while it runs
    started: float = 0.0  # when it last started
    plan: object = None  # the plan it started in
    failures: int = 0  # in a row, counted since it last ran longer than the longest backoff
    retry_at: float = 0.0  # not started again before


Actions = Callable[[Sequence[Callable[[], None]]], None]
Starts = Mapping[str, Callable[[], Query]]


class Together:
    """Runs actions at once and returns when every one is done: a query's stop waits for its
    batch to end, and its start for its sink and source to be ready, mostly on the JVM, Kafka
    or the metastore. One after another, a resize's five stops and five starts took 12 s here
    and over a minute on a busy machine. A thread per query, kept until `close`: each keeps its
    connection to the JVM."""

    def __init__(self, threads: int) -> None:
        self.pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="query")

    def __call__(self, actions: Sequence[Callable[[], None]]) -> None:
        for done in [self.pool.submit(action) for action in actions]:
            done.result()

    def close(self) -> None:
        self.pool.shutdown()


class Supervisor:
    """Runs named queries, each started again when it fails (after a backoff) or its plan
    changes, until told to stop."""

    def __init__(
        self,
        starts: Callable[[], Starts],
        plans: Plans,
        report: Callable[[dict[str, bool]], None],
        *,
        backoff: Backoff = BACKOFF,
        clock: Callable[[], float] = time.monotonic,
        together: Actions | None = None,
    ) -> None:
        """`starts`: the queries wanted now, each by name and how to start it (looked at in this
        order), asked each tick once the plans are read; `report`: told each tick which of them
        are running; `together`: how a tick's stops, and then its starts, run (default: at
        once, `Together`, a thread for each query wanted at first and as many again)."""
        self.plans = plans
        self.starts = starts
        self.report = report
        self.backoff = backoff
        self.clock = clock
        self.queries: dict[str, _Supervised] = {}
        self.draining: dict[str, Query] = {}  # no longer wanted, not yet stopped
        self._pool: Together | None = None  # its own, closed when it stops
        if together is None:
            self._pool = together = Together(2 * len(starts()))
        self.together = together

    def run(self, stop: threading.Event) -> None:
        """Starts every query and keeps them running until `stop` is set, then stops them."""
        while not self.plans.ready and not stop.is_set():  # where each one is, before any starts
            stop.wait(TICK_SECONDS)
            self.plans.read()
        while not stop.is_set():
            self.tick()
            stop.wait(TICK_SECONDS)
        try:
            self.stop_all()
        finally:  # its threads end with it, even when a stop failed
            if self._pool is not None:
                self._pool.close()

    def tick(self) -> None:
        """Reads the plans, looks at every query once (the stops it needs, then the starts
        due, each lot at once), and reports which are running."""
        self.plans.read()
        now = self.clock()
        stops: list[Callable[[], None]] = []
        starts: list[Callable[[], None]] = []
        wanted = self.starts()
        for name in [n for n in self.queries if n not in wanted]:
            query = self.queries.pop(name).query
            if query is not None:
                self.draining[name] = query
        self.draining = {n: q for n, q in self.draining.items() if q.isActive}
        stops += [partial(self._stop_unwanted, n, q) for n, q in self.draining.items()]
        for name, start in wanted.items():
            self.queries.setdefault(name, _Supervised(start)).start = start
        for name, supervised in self.queries.items():
            query = supervised.query
            if query is None:
                if now >= supervised.retry_at and name not in self.plans.held:
                    starts.append(partial(self._start, name, supervised, now))
            elif not query.isActive:
                self._failed(name, supervised, query, now)
            elif supervised.plan != self.plans.plan(name) or name in self.plans.held:
                stops.append(partial(self._stop_for_new_plan, name, supervised, query, now))
        self.together(stops)
        self.draining = {n: q for n, q in self.draining.items() if q.isActive}
        self.together(starts)
        draining = dict.fromkeys(self.draining, True)
        self.report({name: s.query is not None for name, s in self.queries.items()} | draining)

    def stop_all(self) -> None:
        """Stops every query running, at once (handed over in the order they started)."""
        running = [(s.started, n, s.query) for n, s in self.queries.items() if s.query is not None]
        running += [(0.0, n, q) for n, q in self.draining.items()]
        stops = [
            partial(self._stop, name, query)
            for _, name, query in sorted(running, key=lambda item: item[0])
        ]
        self.together(stops)

    @staticmethod
    def _stop(name: str, query: Query) -> None:
        log.info("stopping query %s", name)
        query.stop()

    @staticmethod
    def _stop_unwanted(name: str, query: Query) -> None:
        log.info("stopping query %s: no longer wanted", name)
        try:
            query.stop()
        except Exception as e:  # it is stopped, or will be: go on
            log.error("query %s did not stop cleanly: %s", name, e)

    def _start(self, name: str, supervised: _Supervised, now: float) -> None:
        try:
            supervised.query = supervised.start()
        except Exception as e:  # the supervisor's boundary: log, back off, try again
            log.error("query %s could not start: %s: %s", name, type(e).__name__, e)
            self._back_off(supervised, now)
            return
        supervised.started, supervised.plan = now, self.plans.plan(name)
        log.info("query %s running", name)

    def _failed(self, name: str, supervised: _Supervised, query: Query, now: float) -> None:
        error = query.exception()
        why = str(error).strip().splitlines()[0] if error else "no error"
        log.error("query %s stopped: %s", name, why)
        supervised.query = None
        if now - supervised.started > self.backoff.most:
            supervised.failures = 0  # it had been running well: retry soon
        self._back_off(supervised, now)

    def _stop_for_new_plan(
        self, name: str, supervised: _Supervised, query: Query, now: float
    ) -> None:
        """Rewound, caught up, resized or held: stopped at once, started again from the next
        tick."""
        log.info("query %s stopping for its new plan: %s", name, self.plans.plan(name))
        supervised.query = None
        try:
            query.stop()
        except Exception as e:  # it is stopped, or will be: go on
            log.error("query %s did not stop cleanly: %s", name, e)
        supervised.retry_at = now

    def _back_off(self, supervised: _Supervised, now: float) -> None:
        supervised.failures += 1
        supervised.retry_at = now + self.backoff.delay(supervised.failures)
