"""The fleet's side of backfills and redrives: each runs as a Spark application of its own
(`python -m keystone.router.backfill`, `... .redrive`) in a session of its own, recorded by pid
file under `<state>/run/<kind>/<name>.json`, so a restarted control finds it running. Each pass,
`JobRuns.step` brings one job a step along: started if it should run and does not (again, after
a backoff, where it stopped), stopped if it is cancelled or no longer wanted, and marked done,
cancelled or failed (its application ended `MAX_ATTEMPTS` times without finishing).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keystone.contracts.processes import PidFile, reap, spawn
from keystone.contracts.recovery import JobPhase
from keystone.contracts.settings import Settings
from keystone.control.launcher import last_error

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 10  # starts of one job's application before it is failed
STOP_SECONDS = 60.0  # a cancelled application that has not stopped by then is killed


@dataclass(frozen=True)
class Job:
    """One backfill or redrive as the fleet runs it."""

    name: str  # its pid file's and log's: "<stream>.<output>" or "<stream>"
    record: Any  # a contracts.recovery.Backfill or Redrive: id, phase, attempts
    argv: list[str]  # what runs it: `python -m <module>` and these
    finished: bool  # its progress file says it is done
    wanted: bool  # still asked for (a backfill's output still exists)
    update: Callable[[Any], bool]  # replaces the record if it is still active; whether it was


class JobRuns:
    def __init__(self, settings: Settings, kind: str, clock: Callable[[], float]) -> None:
        """`kind`: "backfills" or "redrives", the folder of its pid files and logs."""
        self.settings = settings
        self.kind = kind
        self.clock = clock
        self._stopping: dict[str, float] = {}  # job id -> when it was asked to stop
        self._retry_at: dict[str, float] = {}

    def record(self, name: str) -> PidFile:
        return PidFile(self.settings.run_dir / self.kind / f"{name}.json")

    def log_path(self, name: str) -> Path:
        return self.settings.logs_dir / self.kind / f"{name}.log"

    def step(self, job: Job) -> None:
        record = self.record(job.name)
        recorded = _recorded_pid(record)
        pid = record.running_pid()
        if pid is None and recorded is not None:  # ended: reaped, its JVM ended with it
            reap(recorded, timeout=5)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(recorded, signal.SIGKILL)
        now = self.clock()
        current = job.record
        if current.phase is JobPhase.CANCELLING or not job.wanted:
            if pid is not None:
                self._stop(current.id, pid, now)
                return
            self._stopping.pop(current.id, None)
            self._finish(job, JobPhase.CANCELLED, now)
            return
        if pid is not None:
            return
        if job.finished:
            self._finish(job, JobPhase.DONE, now)
            return
        if current.attempts >= MAX_ATTEMPTS:
            error = last_error(self.log_path(job.name)) or "its application kept ending"
            self._finish(job, JobPhase.FAILED, now, error)
            return
        if now < self._retry_at.get(current.id, 0.0):
            return
        if not job.update(current.model_copy(update={"attempts": current.attempts + 1})):
            return
        self._retry_at[current.id] = now + min(300.0, 2.0**current.attempts)
        pid = spawn(
            [sys.executable, "-P", *job.argv],
            self.log_path(job.name),
            record,
            cwd=self.settings.state_dir,
            env={**self.settings.to_env(), "PYTHONUNBUFFERED": "1"},
        )
        log.info("%s %s of %s started (pid %d)", self.kind[:-1], current.id, job.name, pid)

    def _stop(self, job_id: str, pid: int, now: float) -> None:
        asked = self._stopping.setdefault(job_id, now)
        if asked == now:
            log.info("stopping %s %s (pid %d)", self.kind[:-1], job_id, pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        elif now - asked > STOP_SECONDS:
            log.warning("%s %s did not stop in time: killing it", self.kind[:-1], job_id)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        reap(pid)

    def _finish(self, job: Job, phase: JobPhase, now: float, error: str = "") -> None:
        ended = job.record.model_copy(update={"phase": phase, "finished_at": now, "error": error})
        if job.update(ended):
            self._retry_at.pop(job.record.id, None)
            log.info("%s %s of %s %s", self.kind[:-1], job.record.id, job.name, phase.value)

    def forget(self, pattern: str) -> None:
        """Kills the applications whose names match `pattern` (a glob): their records go."""
        for path in (self.settings.run_dir / self.kind).glob(f"{pattern}.json"):
            pid = PidFile(path).running_pid()
            if pid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
                reap(pid, timeout=5)
            path.unlink(missing_ok=True)


def _recorded_pid(record: PidFile) -> int | None:
    try:
        pid = json.loads(record.path.read_text()).get("pid")
    except (OSError, ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) else None
