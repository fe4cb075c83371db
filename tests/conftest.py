"""The test stack: the suite starts its own embedded stack on its own ports and state
directory (never touching a running demo) through the real `keystone` command, finds it
through `keystone stack status --json`, and tears it down at the end; one stack for all the
workers of a parallel run (`tests.support.parallel`)."""

from __future__ import annotations

import uuid

import pytest

from tests.support.api import Api
from tests.support.stack import Stack

# `stack`, the session's fixture every stack test asks for, is the parallel plugin's.
pytest_plugins = ["tests.support.budget", "tests.support.parallel"]


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
