"""The proxy's launcher on the real stack: one listening socket per server process, so the
kernel spreads connections across them, and a server that dies is replaced. The tests that kill
a server or the launcher kill a proxy of their own, on the stack's Kafka and Redis, never the
stack's: the other tests go on meanwhile."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from keystone.contracts import http
from tests.support.processes import alive
from tests.support.stack import CHECKOUT, Stack, run_module
from tests.support.waiting import eventually

LISTEN, ESTABLISHED = "0A", "01"


def _sockets(port: int, state: str) -> set[str]:
    """Inodes of this machine's TCP sockets with local `port` in `state` (/proc/net/tcp*)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == state:
                found.add(fields[9])
    return found


def _owners(inodes: set[str]) -> Counter[int]:
    """How many of these sockets each process holds open."""
    held: Counter[int] = Counter()
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # the process or descriptor ended while we looked
        if target.startswith("socket:[") and target[8:-1] in inodes:
            held[int(fd.parent.parent.name)] += 1
    return held


def _servers(port: int) -> set[int]:
    return set(_owners(_sockets(port, LISTEN)))


def _ready(url: str) -> bool:
    try:
        return http.client().get(f"{url}/readyz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _launch(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The launcher run to its end (these runs end by themselves, within seconds)."""
    return run_module("keystone.ingest_proxy.serve", env=env, timeout=60)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_each_server_listens_on_its_own_socket_and_connections_spread(stack: Stack) -> None:
    settings = stack.settings
    port = settings.proxy_port
    # Each server listens once its app has started: `stack up` waits for the first only.
    eventually("every server listens", lambda: len(_servers(port)) == settings.proxy_workers)
    sockets = _sockets(port, LISTEN)
    listeners = _owners(sockets)
    # One socket in each process (uvicorn --workers shares one socket among all its processes).
    assert len(sockets) == len(listeners) == settings.proxy_workers >= 2
    assert set(listeners.values()) == {1}

    connections = [socket.create_connection((settings.bind_host, port)) for _ in range(64)]
    try:
        # Spread by the kernel's hash of each connection's addresses: every server accepts
        # some (all 64 on one of two would happen once in 2**63 runs); a Prometheus scrape may
        # hold one more.
        eventually(
            "every server accepts its share of 64 connections",
            lambda: (
                set(held := _owners(_sockets(port, ESTABLISHED))) == set(listeners)
                and sum(held.values()) >= 64
            ),
        )
    finally:
        for connection in connections:
            connection.close()


def _cpus(pid: int) -> set[frozenset[int]]:
    """The CPUs each thread of `pid` may run on."""
    return {
        frozenset(os.sched_getaffinity(int(task.name)))
        for task in Path(f"/proc/{pid}/task").iterdir()
    }


def test_each_server_stays_with_its_threads_on_its_own_cpu(stack: Stack) -> None:
    settings = stack.settings
    assert settings.proxy_pin_cpus
    cpus = sorted(os.sched_getaffinity(0))
    eventually(
        "every server listens", lambda: len(_servers(settings.proxy_port)) == settings.proxy_workers
    )
    placed = {pid: _cpus(pid) for pid in _servers(settings.proxy_port)}
    # Every thread (the producer's among them, started after the pinning) on the one CPU.
    assert all(len(threads) == 1 and len(next(iter(threads))) == 1 for threads in placed.values())
    on = sorted(cpu for threads in placed.values() for [cpu] in threads)
    assert on == sorted(cpus[i % len(cpus)] for i in range(settings.proxy_workers))


@dataclass(frozen=True)
class Proxy:
    launcher: subprocess.Popen[str]
    port: int
    url: str
    workers: int
    metrics: Path  # PROMETHEUS_MULTIPROC_DIR


@pytest.fixture
def proxy(stack: Stack, tmp_path: Path) -> Iterator[Proxy]:
    """A proxy of this test's own, as `stack up` starts the stack's (its servers' metrics
    merged through a folder), on another port."""
    port = _free_port()
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    env = {**stack.env, "KEYSTONE_PROXY_PORT": str(port), "PROMETHEUS_MULTIPROC_DIR": str(metrics)}
    launcher = subprocess.Popen(
        [sys.executable, "-m", "keystone.ingest_proxy.serve"],
        env=env,
        cwd=CHECKOUT,
        text=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    settings = stack.settings
    url = f"http://{settings.bind_host}:{port}"
    try:
        eventually("the test's proxy ready", lambda: _ready(url), timeout=60)
        yield Proxy(launcher, port, url, settings.proxy_workers, metrics)
    finally:
        launcher.terminate()
        launcher.wait(timeout=60)


def test_a_server_that_dies_is_replaced(proxy: Proxy) -> None:
    # Every server first (the launcher answers ready once the first does), so that the one new
    # server after the kill is the replacement.
    eventually("every server listens", lambda: len(_servers(proxy.port)) == proxy.workers)
    before = _servers(proxy.port)
    victim = min(before)
    victims_cpus = _cpus(victim)
    eventually(
        "the victim's registry version among the metrics",
        lambda: (proxy.metrics / f"gauge_livemin_{victim}.db").exists(),
    )
    os.kill(victim, signal.SIGKILL)
    eventually(
        "another server takes the place of the one killed",
        lambda: not alive(victim) and len(_servers(proxy.port) - before) == 1,
    )
    assert len(_servers(proxy.port)) == proxy.workers
    [replacement] = _servers(proxy.port) - before
    eventually(
        "the replacement is on the CPU of the one killed",
        lambda: _cpus(replacement) == victims_cpus,
    )
    eventually("the proxy answers ready", lambda: _ready(proxy.url))
    # The registry version the killed one had loaded is no longer anyone's: were it left, the
    # version the proxy says every server has would stay at it.
    eventually(
        "the replacement's registry version among the metrics",
        lambda: (proxy.metrics / f"gauge_livemin_{replacement}.db").exists(),
    )
    assert not (proxy.metrics / f"gauge_livemin_{victim}.db").exists()


def test_servers_end_with_their_supervisor(proxy: Proxy) -> None:
    eventually("every server listens", lambda: len(_servers(proxy.port)) == proxy.workers)
    servers = _servers(proxy.port)
    proxy.launcher.kill()
    eventually("the servers end", lambda: not any(alive(pid) for pid in servers))
    assert not _servers(proxy.port)


def test_a_port_taken_even_by_another_proxy_is_refused() -> None:
    # Without the check, servers would join a stale proxy's SO_REUSEPORT group and share its
    # traffic; the launcher refuses before it starts any.
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTONE_")}
        result = _launch(
            {**env, "KEYSTONE_BIND_HOST": "127.0.0.1", "KEYSTONE_PROXY_PORT": str(port)}
        )
    assert result.returncode != 0
    assert "Address already in use" in result.stderr


def test_a_server_that_cannot_start_fails_the_proxy_with_the_reason(stack: Stack) -> None:
    # A producer setting librdkafka refuses fails each server's startup (its lifespan): the
    # launcher stops at once with uvicorn's exit code for that, rather than restarting servers
    # forever. (Events of 2 GB: records over librdkafka's 1 GB `message.max.bytes` bound.)
    port = str(_free_port())
    result = _launch(
        {**stack.env, "KEYSTONE_PROXY_PORT": port, "KEYSTONE_MAX_EVENT_BYTES": "2000000000"}
    )
    assert result.returncode == 3
    assert 'message.max.bytes" value 2000065536 is outside allowed range' in result.stderr
