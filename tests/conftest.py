"""The test stack: the suite starts its own embedded stack on its own ports and state
directory (never touching a running demo) through the real `keystone` command, finds it
through `keystone stack status --json`, and tears it down at the end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from keystone.contracts.settings import Settings

CHECKOUT = Path(__file__).resolve().parents[1]

KEYSTONE = str(Path(sys.executable).parent / "keystone")


def stack_env(state_dir: Path, port_offset: int) -> dict[str, str]:
    """KEYSTONE_* variables for a stack in `state_dir` with every default port moved."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTONE_")}
    env["KEYSTONE_STATE_DIR"] = str(state_dir)
    env["KEYSTONE_CACHE_DIR"] = str(Settings().cache_dir)  # share the downloaded jars
    env["KEYSTONE_SPARK_MASTER"] = "local[2]"
    for name, field in Settings.model_fields.items():
        if name.endswith("_port"):
            env[f"KEYSTONE_{name.upper()}"] = str(field.default + port_offset)
    return env


def private_state_dir() -> Path:
    # Under /tmp and world-traversable: PostgreSQL runs as its own user and must reach it.
    path = Path(tempfile.mkdtemp(prefix="keystone-test-", dir="/tmp"))
    path.chmod(0o755)
    return path


@dataclass
class Stack:
    env: dict[str, str]
    state_dir: Path

    def keystone(
        self, *args: str, timeout: float = 300, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return run([KEYSTONE, *args], env=self.env, timeout=timeout, stdin=stdin)

    def python(self, *args: str, stderr: IO[str] | int = subprocess.PIPE) -> subprocess.Popen[str]:
        """A separate Python process (a Spark application, say) pointed at this stack; a
        long-lived one sends its log to a file (`stderr`), which a pipe nobody reads would block."""
        return subprocess.Popen(
            [sys.executable, *args],
            env=self.env,
            cwd=CHECKOUT,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )

    def status(self) -> dict:
        result = self.keystone("stack", "status", "--json")
        return json.loads(result.stdout)

    def address(self, service: str) -> str:
        return self.status()["services"][service]["address"]

    @property
    def settings(self) -> Settings:
        keys = {
            k[len("KEYSTONE_") :].lower(): v
            for k, v in self.env.items()
            if k.startswith("KEYSTONE_")
        }
        return Settings(**keys)


def run(
    argv: list[str], *, env: dict[str, str], timeout: float, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """A command run to its end in this checkout, its output captured."""
    return subprocess.run(
        argv,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=CHECKOUT,
        check=False,
    )


def run_module(
    module: str, *args: str, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """`python -m module args` of this checkout (its virtualenv's Python)."""
    return run([sys.executable, "-m", module, *args], env=env, timeout=timeout)


def checked(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"{result.args} failed:\n{result.stdout}\n{result.stderr}"
    return result


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


# The control service, called as its users call it: over HTTP, with a token.


@dataclass(frozen=True)
class Api:
    url: str
    token: str | None

    def call(self, method: str, path: str, body: Any = None, **params: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return httpx.request(
            method, f"{self.url}{path}", json=body, params=params, headers=headers, timeout=60
        )

    def ok(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        answer = self.call(method, path, body, **params)
        assert answer.status_code < 300, f"{method} {path}: {answer.status_code} {answer.text}"
        return answer.json() if answer.content else None

    def as_(self, token: str | None) -> Api:
        return Api(self.url, token)


@pytest.fixture(scope="session")
def admin(stack: Stack) -> Api:
    token = (stack.state_dir / "conf" / "control" / "admin-token").read_text().strip()
    return Api(stack.address("control"), token)


@pytest.fixture
def unique() -> str:
    """A suffix that keeps one test's names apart from another's."""
    return uuid.uuid4().hex[:6]


def owner(admin: Api, name: str) -> Api:
    """A new owner, as an API client holding their token."""
    return admin.as_(admin.ok("POST", "/v1/owners", {"name": name})["token"])


def eventually(what: str, check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.5)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks each test by what it needs, from the fixtures it uses: `stack` (the embedded
    stack) or `spark` (a local Spark session); `make check` runs the rest, and the Spark ones."""
    for item in items:
        needs = getattr(item, "fixturenames", ())
        if "stack" in needs:
            item.add_marker(pytest.mark.stack)
        elif "spark" in needs:
            item.add_marker(pytest.mark.spark)
