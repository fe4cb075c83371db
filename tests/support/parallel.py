"""The suite in two workers (`pytest -n 2`, pytest-xdist) beside one shared stack.

- **One stack for every worker.** The first test that needs the stack starts it, under a file
  lock the workers share; the others find it started (`shared_stack`). The run's controlling
  process stops it at the very end (`pytest_sessionfinish`), after every worker is done. Without
  xdist the one process does both.
- **A module to a worker.** Tests are sent to workers a module at a time (a package at a time
  for the packages whose fixtures a whole package shares: `GROUPED`), so a module's shared
  router starts once, in one worker (`ModuleScheduling`). The longest modules go first (their
  budgets, `tests.support.budget`), so neither worker is left with a long one at the end.
- **The cluster stack first, beside the tests without a stack.** The cluster tests' package
  (`tests/cluster/`, its own three-broker stack) is sent first, and the modules that need no
  stack next, so one worker runs the cluster tests while the other runs those (Spark's local
  sessions, the wheel's build). The suite's stack starts only once the cluster's is down
  (`cluster_stack_down`): the machine runs one stack at a time.
- **Tests that disturb the stack run alone.** A test marked `exclusive` stops or restarts a
  service every test uses (Kafka, Elasticsearch, control, the proxy, the stack itself); while it
  runs, no other test that uses the stack does, nor a module's shared fixture starts or ends
  (`turn`, around each test's setup, call and teardown: a readers-writer lock of two files, a
  turnstile and a room, the writer holding the turnstile while it waits, so it is not starved).
  Tests without the stack run beside anything.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from keystone.contracts import http
from tests.support.budget import BUDGETS, DEFAULT_SECONDS, WAITED
from tests.support.stack import Stack, checked, private_state_dir, stack_env
from tests.support.waiting import eventually

SHARED = "keystone_shared_dir"  # the workers' common folder, passed to each worker
STACK_PORT_OFFSET = 10000
CLUSTER_SECONDS = 1800  # the longest the suite's stack waits for the cluster tests to end
GROUPED = ("tests/cluster/", "tests/security/")  # packages whose fixtures the package shares
CLUSTER_DOWN = "cluster-stack.down"  # in the shared folder, once the cluster stack is down


def shared_dir(config: pytest.Config) -> Path:
    """The folder the run's processes share (the controller's, made when it started)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return Path(workerinput[SHARED])
    return Path(config.stash[_SHARED_KEY])


_SHARED_KEY = pytest.StashKey[str]()
_CLUSTER_FIRST = pytest.StashKey[bool]()  # the run has cluster tests: its stack comes first


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "exclusive: the test stops or restarts a service others use: no other test using the "
        "stack runs meanwhile (tests/support/parallel.py)",
    )
    if getattr(config, "workerinput", None) is None:
        config.stash[_SHARED_KEY] = tempfile.mkdtemp(prefix="keystone-run-")


def pytest_configure_node(node: Any) -> None:
    """xdist's hook, in the controller: each worker learns the shared folder."""
    node.workerinput[SHARED] = node.config.stash[_SHARED_KEY]


@contextmanager
def _flock(path: Path, mode: int) -> Iterator[None]:
    with path.open("a") as held:
        fcntl.flock(held, mode)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


def shared_stack(config: pytest.Config) -> Stack:
    """The run's stack: started by the first process to ask, found by the others."""
    folder = shared_dir(config)
    record = folder / "stack.json"
    with _flock(folder / "stack.lock", fcntl.LOCK_EX):
        if record.exists():
            return _stack(json.loads(record.read_text())["state_dir"])
        state_dir = private_state_dir()
        handle = _stack(str(state_dir))
        record.write_text(json.dumps({"state_dir": str(state_dir)}))  # down at the end, whatever
        checked(handle.keystone("stack", "up", timeout=900))
        return handle


@pytest.fixture(scope="session")
def stack(request: pytest.FixtureRequest) -> Stack:
    """Started by the first test that asks (in any worker), down when the run ends."""
    return shared_stack(request.config)


def _stack(state_dir: str) -> Stack:
    path = Path(state_dir)
    return Stack(env=stack_env(path, port_offset=STACK_PORT_OFFSET), state_dir=path)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """In the controlling process, after every worker: the shared stack down and gone."""
    if getattr(session.config, "workerinput", None) is not None:
        return
    folder = shared_dir(session.config)
    record = folder / "stack.json"
    if record.exists() and os.environ.get("KEYSTONE_TEST_KEEP_STACK"):
        # To look into after a failure: `keystone stack down --purge` with its state folder.
        print(f"\nthe suite's stack kept: {json.loads(record.read_text())['state_dir']}")
        return
    if record.exists():
        handle = _stack(json.loads(record.read_text())["state_dir"])
        handle.keystone("stack", "down", "--purge")
        shutil.rmtree(handle.state_dir, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def turn(folder: Path, exclusive: bool) -> Iterator[None]:
    """A turn with the stack: shared with other modules, or alone."""
    turnstile, room = folder / "turnstile.lock", folder / "room.lock"
    if exclusive:
        with _flock(turnstile, fcntl.LOCK_EX), _flock(room, fcntl.LOCK_EX):
            yield
        return
    with _flock(turnstile, fcntl.LOCK_EX):
        pass  # through the turnstile: a writer waiting holds it
    with _flock(room, fcntl.LOCK_SH):
        yield


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Each test that uses the stack takes its turn around the whole of its run: its setup,
    where a module's shared fixtures start (its shared router, say), its call, and its
    teardown, where they end. A test marked `exclusive` takes it alone."""
    if "stack" not in getattr(item, "fixturenames", ()):
        yield
        return
    exclusive = item.get_closest_marker("exclusive") is not None
    began = time.monotonic()
    folder = shared_dir(item.config)
    if item.config.stash.get(_CLUSTER_FIRST, False):
        eventually(
            "the cluster tests' stack down before the suite's starts",
            (folder / CLUSTER_DOWN).exists,
            timeout=CLUSTER_SECONDS,
        )
    with turn(folder, exclusive):
        # Time no report counts (it comes before the setup's): the run sums it apart.
        item.user_properties.append((WAITED, time.monotonic() - began))
        yield
        if exclusive:  # the stack as it found it before another test takes its turn
            settled(shared_stack(item.config))


def cluster_stack_down(config: pytest.Config) -> None:
    """Said by the cluster tests' fixture once their stack is down (or never came up): the
    suite's stack may start."""
    (shared_dir(config) / CLUSTER_DOWN).touch()


def settled(stack: Stack) -> None:
    """Until the proxy is ready again (the registry read, Kafka answering: `/readyz`) and
    control answers, after a test that stopped or restarted a service."""

    def ready() -> bool:
        try:
            proxy = http.client().get(f"{stack.settings.proxy_url}/readyz", timeout=5)
            control = http.client().get(f"{stack.settings.control_urls[0]}/healthz", timeout=5)
        except httpx.HTTPError:
            return False
        return proxy.status_code == 200 and control.status_code == 200

    eventually("the stack ready again after an exclusive test", ready, timeout=180)


def scope_of(nodeid: str) -> str:
    """The unit a worker is given: a grouped package, else a module."""
    path = nodeid.split("::", 1)[0]
    return next((g for g in GROUPED if path.startswith(g)), path)


def expected_seconds(scope: str) -> float:
    return BUDGETS.get(
        scope, sum(s for m, s in BUDGETS.items() if m.startswith(scope)) or DEFAULT_SECONDS
    )


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    config.option.loadscopereorder = False  # the collection's order: the longest first
    return ModuleScheduling(config, log)


@pytest.hookimpl(trylast=True)  # after pytest-randomly's shuffle (tryfirst), and `-m`, `-k`
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The cluster tests first, together; then the modules without a stack, which run beside
    them; then those with the suite's stack. A module goes where its most demanding test does.
    In workers, the longest modules first within each (each module's tests in their shuffled
    order)."""
    workers = getattr(config, "workerinput", None) is not None
    needs: dict[str, set[str]] = defaultdict(set)
    for item in items:
        needs[scope_of(item.nodeid)].update(getattr(item, "fixturenames", ()))
    phases = {s: 0 if "cluster" in n else 2 if "stack" in n else 1 for s, n in needs.items()}
    config.stash[_CLUSTER_FIRST] = {0, 2} <= set(phases.values())

    def order(item: pytest.Item) -> tuple[int, float]:
        scope = scope_of(item.nodeid)
        return phases[scope], -expected_seconds(scope) if workers else 0.0

    items.sort(key=order)  # stable: the shuffled order else
