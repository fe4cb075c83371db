"""Faults a load test injects into the embedded stack, each bounded in time and undone: a router
killed (the fleet restarts it), Kafka restarted, Elasticsearch or the control service stopped for
a while. `--fault NAME[@AT][+FOR]`: at AT seconds into the run (default a third of it), for FOR
seconds (each fault has its default)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from dataclasses import dataclass, field
from typing import ClassVar

from keystone.contracts.errors import BadRequest, StackError
from keystone.contracts.processes import PidFile, stop
from keystone.contracts.settings import Settings
from keystone.control.launcher import Deployment
from keystone.stack import lifecycle


@dataclass
class Fault:
    """One fault of a run: when it began and ended (seconds into the run), and what it did."""

    name: str
    at: float
    hold: float
    began: float | None = None
    ended: float | None = None
    notes: list[str] = field(default_factory=list)

    kinds: ClassVar[dict[str, tuple[str, float]]] = {
        # name: (what it does, default seconds it lasts)
        "kill-router": ("SIGKILL to the stream's router and its JVM", 0.0),
        "restart-kafka": ("Kafka stopped, then started again", 20.0),
        "stop-elasticsearch": ("Elasticsearch stopped, then started again", 60.0),
        "stop-control": ("the control service stopped, then started again", 30.0),
    }

    @classmethod
    def parse(cls, text: str, duration: float) -> Fault:
        found = re.fullmatch(r"([a-z-]+)(?:@(\d+(?:\.\d+)?))?(?:\+(\d+(?:\.\d+)?))?", text)
        if found is None or found[1] not in cls.kinds:
            raise BadRequest(
                f"--fault {text!r}: expected NAME[@AT][+FOR], NAME one of {', '.join(cls.kinds)}"
            )
        at = float(found[2]) if found[2] else duration / 3
        hold = float(found[3]) if found[3] else cls.kinds[found[1]][1]
        if at >= duration:
            raise BadRequest(f"--fault {text!r}: at {at:.0f} s, after the run ({duration:.0f} s)")
        return cls(found[1], at, hold)

    @property
    def what(self) -> str:
        return self.kinds[self.name][0]


SERVICE = {
    "restart-kafka": "kafka",
    "stop-elasticsearch": "elasticsearch",
    "stop-control": "control",
}


def check(settings: Settings, faults: list[Fault]) -> None:
    """Faults are injected into the embedded stack only: a cluster of one's own is not ours to
    break."""
    for fault in faults:
        service = SERVICE.get(fault.name)
        if service is not None and not settings.is_embedded(service):
            raise BadRequest(f"--fault {fault.name}: {service} is not the embedded one")


def inject(settings: Settings, stream: str, fault: Fault, started: float) -> None:
    """Runs one fault to its end: begin, hold, undo (blocking; a load test runs it in a
    thread beside the producers)."""
    if fault.name == "kill-router":
        deployed = Deployment.load(settings, stream)
        if deployed is None or not deployed.alive():
            fault.notes.append("no router was running")
            return
        fault.began = time.time() - started
        # As a crash would: the fleet must notice by itself (its record stays).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(deployed.pid, signal.SIGKILL)
        fault.notes.append(f"router pid {deployed.pid} killed")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            again = Deployment.load(settings, stream)
            if again is not None and again.pid != deployed.pid and again.alive():
                fault.ended = time.time() - started
                fault.notes.append(
                    f"the fleet started it again (pid {again.pid}) "
                    f"{fault.ended - fault.began:.1f} s later"
                )
                return
            time.sleep(0.2)
        fault.notes.append("the fleet had not started it again after 120 s")
        return
    service = SERVICE[fault.name]
    pidfile = PidFile(settings.run_dir / f"{service}.pid")
    fault.began = time.time() - started
    if not stop(pidfile, signal.SIGTERM, timeout=60):
        raise StackError(f"{service} was not running: cannot inject {fault.name}")
    fault.notes.append(f"{service} stopped at {fault.began:.1f} s")
    time.sleep(fault.hold)
    restart(settings)
    fault.ended = time.time() - started
    fault.notes.append(f"{service} healthy again at {fault.ended:.1f} s")


def restart(settings: Settings) -> None:
    """Starts whatever of the stack is stopped, and waits until all of it is healthy."""
    lifecycle.up(settings, lambda _service, _state: None)
