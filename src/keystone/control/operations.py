"""What owners ask of recovery, one kind of operation at a time (`contracts.recovery`): a rewind
(`control.rewinds`), a backfill (`control.backfills`), a redrive (`control.redrives`). Each kind's
planner is an `Operations`: it finds the output the owner may repair, checks that none of the
kind (nor of a kind it excludes) is under way there, records the operation once planned through
the store's one guarded start (in the audit log), and, for a job, cancels it and says how far it
has come (`JobView`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, Generic, TypeVar

from keystone.contracts.errors import Conflict, NotFound
from keystone.contracts.recovery import (
    OPERATIONS,
    Job,
    JobPhase,
    JobProgress,
    Operation,
    RestorePoint,
    check_free,
)
from keystone.contracts.settings import Settings
from keystone.contracts.sinks import Replay
from keystone.contracts.spec import OutputSpec, StreamSpec
from keystone.control.positions import Positions
from keystone.control.store import Planned, Store, audit
from keystone.control.streams import Streams
from keystone.control.tenancy import Caller

Op = TypeVar("Op", bound=Operation)
J = TypeVar("J", bound=Job)


def iso(epoch_seconds: float) -> str:
    """A moment as the API and its messages give it: RFC 3339 in UTC, with 'Z'."""
    return datetime.fromtimestamp(epoch_seconds, UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class JobView(Generic[J]):
    """A job and how far it has come."""

    job: J
    progress: JobProgress
    eta_seconds: float | None  # at the job's rate, while it runs and its total is known
    replay: Replay | None = None  # what its output's sink does with records written again


def view_of(settings: Settings, stream: str, job: J, replay: Replay | None = None) -> JobView[J]:
    progress = job.progress_of(settings.state_dir, stream)
    return JobView(job, progress, progress.eta_seconds(job), replay)


class Operations(Generic[Op]):
    kind: ClassVar[type[Operation]]

    def __init__(
        self,
        settings: Settings,
        store: Store,
        streams: Streams,
        positions: Positions | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.store = store
        self.streams = streams
        self.positions = positions if positions is not None else Positions(settings)
        self.clock = clock

    def output_of(self, caller: Caller, stream: str, output: str) -> tuple[StreamSpec, OutputSpec]:
        """The caller's stream and its output (404 for either not there, or not theirs)."""
        spec = self.streams.get(caller, stream)
        found = spec.output(output)
        if found is None:
            raise NotFound(f"stream {stream!r} has no output {output!r}")
        return spec, found

    def latest(self, stream: str, output: str | None = None) -> Op | None:
        """The latest operation of the kind on the output (or of the stream's)."""
        found = self.store.operations(self.kind, stream)
        return found.get(output if self.kind.per_output else stream)  # type: ignore[arg-type, return-value]

    def check_free(self, stream: str, output: str | None = None) -> None:
        """409 while one of the kind, or of a kind it excludes, is under way there: what the
        store's start checks again as it records the operation."""
        others = [
            self.store.operations(OPERATIONS[k], stream).get(output)  # type: ignore[arg-type]
            for k in self.kind.excludes
        ]
        check_free(self.kind, stream, output, [self.latest(stream, output), *others])

    @property
    def action(self) -> str:
        """Its audit entries' action: `output.rewind`, `stream.redrive`."""
        return f"{'output' if self.kind.per_output else 'stream'}.{self.kind.noun()}"

    def record(
        self,
        caller: Caller,
        record: Op,
        planned: Planned,
        keeps: Callable[[RestorePoint], bool] | None = None,
        **detail: Any,
    ) -> None:
        """Starts a planned operation (the store's guarded start), in the audit log."""
        spec = self.streams.get(caller, planned.stream)
        entry = audit(
            caller.name,
            self.action,
            spec.name,
            owner=spec.owner,
            **self._where(planned),
            **{self.kind.noun(): record.id},
            **detail,
        )
        self.store.recovery.start(record, planned, entry, keeps)

    @staticmethod
    def _where(planned: Planned) -> dict[str, str]:
        return {"output": planned.output.name} if planned.output is not None else {}


class Jobs(Operations[J]):
    """A kind of operation that runs as an application of its own: it may be cancelled, and
    says how far it has come."""

    def cancel(self, caller: Caller, stream: str, output: str | None = None) -> J:
        spec, current = self._current(caller, stream, output)
        if not current.active:
            raise Conflict(
                f"{self.kind.noun()} {current.id} is {current.phase.value}: nothing to cancel"
            )
        cancelling = current.model_copy(update={"phase": JobPhase.CANCELLING})
        where = {"output": output} if output is not None else {}
        entry = audit(
            caller.name,
            f"{self.action}.cancel",
            stream,
            owner=spec.owner,
            **where,
            **{self.kind.noun(): current.id},
        )
        if not self.store.recovery.update(stream, cancelling, lambda c: c.active, entry):
            raise Conflict(f"{self.kind.noun()} {current.id} changed meanwhile: ask again")
        return cancelling

    def view(self, caller: Caller, stream: str, output: str | None = None) -> JobView[J]:
        """The latest job and how far it has come (404 if there is none)."""
        spec, current = self._current(caller, stream, output)
        replay = None
        if output is not None:
            found = spec.output(output)
            replay = found.sink.kind.replay if found is not None else None
        return view_of(self.settings, stream, current, replay)

    def _current(self, caller: Caller, stream: str, output: str | None) -> tuple[StreamSpec, J]:
        if output is not None:
            spec, _ = self.output_of(caller, stream, output)
            where = f"output {stream}.{output}"
        else:
            spec = self.streams.get(caller, stream)
            where = f"stream {stream!r}"
        current = self.latest(stream, output)
        if current is None:
            raise NotFound(f"{where} {self.kind.never}")
        return spec, current  # type: ignore[return-value]
