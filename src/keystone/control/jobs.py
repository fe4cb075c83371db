"""The fleet's side of jobs (`contracts.recovery.Job`: backfills, redrives): each runs as a
Spark application of its own (`python -m keystone.router.jobs --stream <s> --id <id>`) in a
session of its own, recorded by pid file under `<state>/run/<kind>/<name>.json`, so a restarted
control finds it running. Each pass, `JobRuns.step` brings every active job of its kind on a
stream a step along: started if it should run and does not (again, after a backoff, where it
stopped), stopped if it is cancelled or no longer wanted, and marked done, cancelled or failed
(its application ended `MAX_ATTEMPTS` times without finishing).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Generic, TypeVar

from keystone.contracts.backoff import Backoff
from keystone.contracts.errors import KeystoneError
from keystone.contracts.processes import PidFile, reap, spawn
from keystone.contracts.recovery import JOBS_MODULE, Job, JobPhase
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.control.launcher import last_error
from keystone.control.store import Store

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 10  # starts of one job's application before it is failed
STOP_SECONDS = 60.0  # a cancelled application that has not stopped by then is killed
# A job's application that ended unfinished starts again after 1, 2, 4 ... s, at most 5 min.
RESTARTS = Backoff(first=1.0, factor=2.0, most=300.0)
J = TypeVar("J", bound=Job)


class JobRuns(Generic[J]):
    def __init__(
        self,
        settings: Settings,
        store: Store,
        kind: type[J],
        clock: Callable[[], float],
        backoff: Backoff = RESTARTS,
    ) -> None:
        self.settings = settings
        self.store = store
        self.kind = kind
        self.clock = clock
        self.backoff = backoff
        self._stopping: dict[str, float] = {}  # job id -> when it was asked to stop
        self._retry_at: dict[str, float] = {}

    def step(self, spec: StreamSpec) -> None:
        """Every active job of the kind on the stream, a step along."""
        for where, job in self.store.operations(self.kind, spec.name).items():
            if not job.active:
                continue
            # A job of an output the stream no longer has is no longer wanted.
            wanted = not self.kind.per_output or spec.output(where) is not None
            try:
                self._step(spec.name, where, job, wanted)
            except KeystoneError as e:  # Redis away: next pass
                log.warning("%s %s: %s", self.kind.noun(), job.id, e)

    def forget(self, stream: str, output: str | None = None) -> None:
        """Kills the stream's (or output's) applications of the kind: their records go."""
        pattern = stream if not self.kind.per_output else f"{stream}.{output or '*'}"
        for path in self.settings.job_run_dir(self.kind.kind).glob(f"{pattern}.json"):
            pid = PidFile(path).running_pid()
            if pid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
                reap(pid, timeout=5)
            path.unlink(missing_ok=True)

    def _step(self, stream: str, where: str, job: J, wanted: bool) -> None:
        name = f"{stream}.{where}" if self.kind.per_output else stream
        record = PidFile(self.settings.job_run_dir(self.kind.kind) / f"{name}.json")
        log_path = self.settings.job_logs_dir(self.kind.kind) / f"{name}.log"
        recorded = _recorded_pid(record)
        pid = record.running_pid()
        if pid is None and recorded is not None:  # ended: reaped, its JVM ended with it
            reap(recorded, timeout=5)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(recorded, signal.SIGKILL)
        now = self.clock()
        if job.phase is JobPhase.CANCELLING or not wanted:
            if pid is not None:
                self._stop(job.id, pid, now)
                return
            self._stopping.pop(job.id, None)
            self._finish(stream, name, job, JobPhase.CANCELLED, now)
            return
        if pid is not None:
            return
        if job.progress_of(self.settings.state_dir, stream).done:
            self._finish(stream, name, job, JobPhase.DONE, now)
            return
        if job.attempts >= MAX_ATTEMPTS:
            error = last_error(log_path) or "its application kept ending"
            self._finish(stream, name, job, JobPhase.FAILED, now, error)
            return
        if now < self._retry_at.get(job.id, 0.0):
            return
        if not self._update(stream, job.model_copy(update={"attempts": job.attempts + 1})):
            return
        self._retry_at[job.id] = now + self.backoff.delay(job.attempts + 1)
        pid = spawn(
            [sys.executable, "-P", "-m", JOBS_MODULE, "--stream", stream, "--id", job.id],
            log_path,
            record,
            cwd=self.settings.state_dir,
            env={
                **self.settings.to_env(),
                **self.settings.kafka_principal_env("router"),
                "PYTHONUNBUFFERED": "1",
            },
        )
        log.info("%s %s of %s started (pid %d)", self.kind.noun(), job.id, name, pid)

    def _update(self, stream: str, job: J) -> bool:
        """Replaces the job's record if it is still active; whether it was."""
        return self.store.recovery.update(stream, job, lambda current: current.active)

    def _stop(self, job_id: str, pid: int, now: float) -> None:
        asked = self._stopping.setdefault(job_id, now)
        if asked == now:
            log.info("stopping %s %s (pid %d)", self.kind.noun(), job_id, pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        elif now - asked > STOP_SECONDS:
            log.warning("%s %s did not stop in time: killing it", self.kind.noun(), job_id)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        reap(pid)

    def _finish(
        self, stream: str, name: str, job: J, phase: JobPhase, now: float, error: str = ""
    ) -> None:
        ended = job.model_copy(update={"phase": phase, "finished_at": now, "error": error})
        if self._update(stream, ended):
            self._retry_at.pop(job.id, None)
            log.info("%s %s of %s %s", self.kind.noun(), job.id, name, phase.value)


def _recorded_pid(record: PidFile) -> int | None:
    try:
        pid = json.loads(record.path.read_text()).get("pid")
    except (OSError, ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) else None
