"""The fleet's process side: what it takes to run one stream's router as a process on this
machine, so that the fleet itself (`keystone.control.fleet`) only decides.

`Launcher` is what the fleet asks; `ProcessLauncher` does it: spawns `python -m keystone.router`
in a session of its own (its working directory the state directory; everything else it learns
from the settings passed in its environment), records it by pid file under
`<state>/run/routers/` (a `Deployment`), registers its metrics with Prometheus, signals it,
reaps it, probes its /metrics, and reads its log.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

import httpx

from keystone.contracts import http
from keystone.contracts import metrics as names
from keystone.contracts.checkpoints import remove_generations
from keystone.contracts.fronting import query_keys
from keystone.contracts.processes import PidFile, port_in_use, process_start_time, reap, spawn
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.dashboards.targets import remove_target, write_target

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Deployment:
    """A router process the fleet started; stored as its pid file (`pid` and `start` are what
    `contracts.processes.PidFile` reads, so `keystone stack down` can stop it too)."""

    stream: str
    pid: int
    start: int
    port: int
    fingerprint: str
    started: float

    @staticmethod
    def path(settings: Settings, stream: str) -> Path:
        return settings.routers_run_dir / f"{stream}.json"

    def save(self, settings: Settings) -> None:
        path = self.path(settings, self.stream)
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_suffix(".tmp")
        staging.write_text(json.dumps(asdict(self)))
        os.replace(staging, path)

    @classmethod
    def load(cls, settings: Settings, stream: str) -> Deployment | None:
        """The stream's record, if there is one (only read: whether its process still runs is
        for the fleet to see, `alive()`)."""
        return cls.load_all(settings, f"{stream}.json").get(stream)

    @classmethod
    def load_all(cls, settings: Settings, pattern: str = "*.json") -> dict[str, Deployment]:
        found = {}
        for path in sorted(settings.routers_run_dir.glob(pattern)):
            try:
                found[path.stem] = cls(**json.loads(path.read_text()))
            except (ValueError, TypeError):
                log.warning("ignoring unreadable router record %s", path)
        return found

    def alive(self) -> bool:
        return process_start_time(self.pid) == self.start

    def remove(self, settings: Settings) -> None:
        self.path(settings, self.stream).unlink(missing_ok=True)


class Launcher(Protocol):
    """What the fleet asks of the routers' process side. Each call does one thing and returns
    at once (but `reap`, which may wait a moment for an ended process)."""

    def deployments(self) -> dict[str, Deployment]:
        """Every router recorded as started, by stream (running or not)."""
        ...

    def alive(self, deployed: Deployment) -> bool:
        """Whether the recorded process still runs."""
        ...

    def start(
        self, spec: StreamSpec, *, port: int, fingerprint: str, started: float, sized_for: int
    ) -> Deployment:
        """Starts the stream's router (on `port` for its metrics if that is free, else on
        another), sized for `sized_for` events per second, records it and registers its
        metrics target; returns its record."""
        ...

    def reap(self, deployed: Deployment) -> int | None:
        """Cleans up after an ended router (what is left of its process group, its record);
        its exit code, when it can be known."""
        ...

    def stop(self, deployed: Deployment) -> None:
        """Asks the router to stop (it stops its queries, then its JVM)."""
        ...

    def kill(self, deployed: Deployment) -> None:
        """Kills the router's whole process group."""
        ...

    def up(self, deployed: Deployment) -> bool:
        """Whether the router delivers: one of its queries at least runs."""
        ...

    def last_error(self, stream: str) -> str:
        """The last error the stream's router's current run logged ("" for none)."""
        ...

    def remove_target(self, stream: str) -> None:
        """Unregisters the router's metrics target."""
        ...

    def remove_checkpoints(self, stream: str, output: str | None = None) -> None:
        """Forgets the stream's progress (or one output's: `output` must be a valid name)."""
        ...


class ProcessLauncher:
    """Routers as processes on this machine, recorded under the settings' state directory."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def deployments(self) -> dict[str, Deployment]:
        return Deployment.load_all(self.settings)

    def alive(self, deployed: Deployment) -> bool:
        return deployed.alive()

    def start(
        self, spec: StreamSpec, *, port: int, fingerprint: str, started: float, sized_for: int
    ) -> Deployment:
        settings = self.settings
        if not port or port_in_use(settings.bind_host, port):
            port = _free_port(settings.bind_host)
        log_path = router_log(settings, spec.name)
        # -P: the working directory (the state directory) is not on the path, so nothing left
        # there can shadow the package.
        argv = [
            sys.executable,
            "-P",
            "-m",
            "keystone.router",
            "--stream",
            spec.name,
            "--metrics-port",
            str(port),
            "--sized-for",
            str(sized_for),
        ]
        record = Deployment.path(settings, spec.name)
        pid = spawn(
            argv,
            log_path,
            PidFile(record),
            cwd=settings.state_dir,
            env={
                **settings.to_env(),
                **settings.kafka_principal_env("router"),
                "PYTHONUNBUFFERED": "1",
            },
        )
        start = process_start_time(pid)
        deployed = Deployment(spec.name, pid, start or 0, port, fingerprint, started)
        deployed.save(settings)
        write_target(
            settings,
            f"router-{spec.name}",
            [f"{settings.bind_host}:{port}"],
            {"job": "keystone_router", "stream": spec.name},
        )
        return deployed

    def reap(self, deployed: Deployment) -> int | None:
        # None for a router adopted from an earlier control; a child of ours that /proc shows
        # gone may need a moment before it can be reaped.
        code = reap(deployed.pid, timeout=5)
        _kill_group(deployed.pid)  # its JVM must not outlive it
        deployed.remove(self.settings)
        return code

    def stop(self, deployed: Deployment) -> None:
        # The router's Python process only: it stops its queries and then its JVM.
        with contextlib.suppress(ProcessLookupError):
            os.kill(deployed.pid, signal.SIGTERM)

    def kill(self, deployed: Deployment) -> None:
        _kill_group(deployed.pid)

    def up(self, deployed: Deployment) -> bool:
        return _router_up(self.settings.bind_host, deployed.port, deployed.stream)

    def last_error(self, stream: str) -> str:
        return last_error(router_log(self.settings, stream))

    def remove_target(self, stream: str) -> None:
        remove_target(self.settings, f"router-{stream}")

    def remove_checkpoints(self, stream: str, output: str | None = None) -> None:
        if output is None:
            shutil.rmtree(self.settings.checkpoints_dir / stream, ignore_errors=True)
        else:
            for key in query_keys(self.settings, output):  # its queries on every cluster
                remove_generations(self.settings, stream, key)


def router_log(settings: Settings, stream: str) -> Path:
    return settings.routers_logs_dir / f"{stream}.log"


def last_error(path: Path) -> str:
    """The last error the router's current run logged, or the end of a traceback."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 65536))
            text = f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""
    run = text.rsplit("\n=== ", 1)[-1].splitlines()
    for line in reversed(run):
        if (
            " ERROR " in line
            or line.startswith(("Traceback", "Exception"))
            or (line and not line.startswith((" ", "\t")) and "Error:" in line)
        ):
            return line.strip()[:500]
    return ""


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _router_up(host: str, port: int, stream: str) -> bool:
    """Running once one of its queries runs: a router with one output failing still delivers
    the others' (whether every one runs is `keystone_router_up`'s to say, and the router-down
    alert's)."""
    return 1.0 in (router_metric(host, port, names.ROUTER_QUERY_UP, stream) or [])


def router_metric(host: str, port: int, name: str, stream: str) -> list[float] | None:
    """The values of one of the stream's router's metrics (one per label set) as its /metrics
    says now; None when it does not answer."""
    # That one metric alone (prometheus_client's `name[]`): the fleet asks every second, and the
    # whole page (every output's histograms) cost control a tenth of a core for three routers.
    url = f"http://{host}:{port}/metrics"
    try:
        text = http.client().get(url, params={"name[]": name}, timeout=1).text
    except httpx.HTTPError:
        return None
    label = f'stream="{stream}"'
    return [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(f"{name}{{") and label in line
    ]
