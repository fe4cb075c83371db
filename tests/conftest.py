"""The test stack: the suite starts its own embedded stack on its own ports and state
directory (never touching a running demo) through the real `keystone` command, finds it
through `keystone stack status --json`, and tears it down at the end."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator

import pytest

from tests.support.api import Api
from tests.support.stack import Stack, checked, private_state_dir, stack_env

pytest_plugins = ["tests.support.budget"]


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    state_dir = private_state_dir()
    handle = Stack(env=stack_env(state_dir, port_offset=10000), state_dir=state_dir)
    try:
        checked(handle.keystone("stack", "up", timeout=900))
        yield handle
    finally:
        handle.keystone("stack", "down", "--purge")
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def admin(stack: Stack) -> Api:
    token = (stack.state_dir / "conf" / "control" / "admin-token").read_text().strip()
    return Api(stack.address("control"), token)


@pytest.fixture
def unique() -> str:
    """A suffix that keeps one test's names apart from another's."""
    return uuid.uuid4().hex[:6]


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by these marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks each test by what it needs, from the fixtures it uses: `stack` (the embedded
    stack) or `spark` (a local Spark session); `make check` runs the tests that are neither."""
    for item in items:
        needs = getattr(item, "fixturenames", ())
        if "stack" in needs or "cluster" in needs:  # the cluster stack is a stack too
            item.add_marker(pytest.mark.stack)
        elif "spark" in needs:
            item.add_marker(pytest.mark.spark)


@pytest.hookimpl(trylast=True)  # after pytest-randomly's shuffle
def pytest_collection_finish(session: pytest.Session) -> None:
    """Puts the cluster tests first, together: their stack comes and goes before the suite's
    is started (one stack at a time on this machine), so neither is started twice."""
    on_cluster = {id(i) for i in session.items if "cluster" in getattr(i, "fixturenames", ())}
    session.items.sort(key=lambda i: id(i) not in on_cluster)  # stable: the shuffled order else
