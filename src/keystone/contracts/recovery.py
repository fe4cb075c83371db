"""Restore points, rewinds and backfills, as control keeps them in the registry and the router
reads them.

A **restore point** is a position an output committed (`contracts.checkpoints.Commit`) with the
generation and query it belongs to; control collects them from the output's checkpoint and thins
old ones (`thin`). A **rewind** takes one output back to a position: the router starts the
output's next checkpoint generation there, replays at a bounded rate until it reaches `until`
(where the fronting topic ended when the rewind was asked), labels what it writes again to Kafka
with `ks_replay`, and has a Hive output replace the batches the rewind undoes (`replaced`).

A **backfill** routes a time range of the stream's archive through one output's current spec,
as an application of its own the fleet starts and watches; it records how far it has come in a
`BackfillProgress` file.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field

from keystone.contracts.checkpoints import Offsets

DENSE_SECONDS = 3600.0  # every restore point of the last hour is kept
SPARSE_SECONDS = 300.0  # older ones: the last of every five minutes


class _Record(BaseModel):
    # Read back from Redis, which anyone who can write there could have written: checked.
    model_config = ConfigDict(extra="ignore", frozen=True)


class RestorePoint(_Record):
    id: str = Field(
        description="'<generation>-<batch>' ('<generation>-start' where it began), stable while "
        "the point is kept."
    )
    time: float = Field(description="When the output had delivered everything before it.")
    generation: int = Field(ge=0)
    batch: int = Field(ge=-1, description="-1: where the generation started.")
    query: str = Field("", description="The streaming query that committed it.")
    offsets: Offsets

    @staticmethod
    def make_id(generation: int, batch: int) -> str:
        return f"{generation}-{batch if batch >= 0 else 'start'}"

    def before(self, offsets: Offsets) -> bool:
        """Whether this point is at or before `offsets` in every partition."""
        return all(offsets.get(p, 0) >= o for p, o in self.offsets.items())


class RewindPhase(StrEnum):
    REPLAYING = "replaying"  # rate limited, until it reaches `until`
    CAUGHT_UP = "caught_up"  # running as usual again


class Replaced(_Record):
    """Batches a rewind undoes: the query's batches after `after` (-1: all of them)."""

    query: str
    after: int = Field(ge=-1)


class Rewind(_Record):
    """One output's latest rewind; `generation` is the checkpoint generation it started."""

    id: str = Field(pattern=r"^rw-[0-9a-f]{12}$")
    output: str
    generation: int = Field(ge=1)
    start: Offsets
    until: Offsets
    rate: int = Field(ge=1, description="Events per second the replay reads at most.")
    replaced: list[Replaced] = Field(default_factory=list)
    phase: RewindPhase = RewindPhase.REPLAYING
    requested_at: float
    by: str
    target: str = Field(description="What was asked: a restore point, a time or offsets.")
    restore_point: str | None = None
    total: int = Field(ge=0, description="Records of the fronting topic the replay reads.")
    finished_at: float = 0.0

    @property
    def replaying(self) -> bool:
        return self.phase is RewindPhase.REPLAYING

    def replayed(self, committed: Offsets) -> int:
        """Records of the replay the output has committed, given its committed offsets."""
        return sum(
            max(0, min(committed.get(p, start), self.until.get(p, start)) - start)
            for p, start in self.start.items()
        )

    def caught_up(self, committed: Offsets) -> bool:
        return all(committed.get(p, self.start.get(p, 0)) >= u for p, u in self.until.items())


def thin(points: list[RestorePoint], now: float, keep_seconds: float) -> list[RestorePoint]:
    """The points to drop: those older than `keep_seconds`, and of those older than an hour all
    but the newest of each generation in each five minutes; never the newest of all. Every
    generation keeps a point while any is kept from its time: its query's name is how a Hive
    rewind to before it knows which files to replace."""
    drop = []
    newest_in: dict[tuple[int, int], RestorePoint] = {}
    ordered = sorted(points, key=lambda p: p.time)
    # The newest is kept whatever its age: an idle output commits nothing new, and is still
    # exactly there.
    for point in ordered[:-1]:
        age = now - point.time
        if age > keep_seconds:
            drop.append(point)
        elif age > DENSE_SECONDS:
            bucket = (point.generation, int(point.time // SPARSE_SECONDS))
            earlier = newest_in.get(bucket)
            if earlier is not None:
                drop.append(earlier)
            newest_in[bucket] = point
    return drop


class JobPhase(StrEnum):
    """A backfill's or a redrive's: each runs as an application of its own."""

    RUNNING = "running"  # its application runs (or the fleet starts it again)
    CANCELLING = "cancelling"  # asked to stop: the fleet stops its application
    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"  # its application failed too often in a row


class Backfill(_Record):
    """One output's latest backfill: its events ingested in [start, end), read again from the
    stream's archive and routed through the output's spec as it is now, as an application
    of its own beside the router."""

    id: str = Field(pattern=r"^bf-[0-9a-f]{12}$")
    output: str
    start: int = Field(ge=0, description="Ingest time from, epoch ms (inclusive).")
    end: int = Field(ge=0, description="Ingest time to, epoch ms (exclusive).")
    rate: int = Field(ge=1, description="Events per second read at most.")
    phase: JobPhase = JobPhase.RUNNING
    requested_at: float
    by: str
    attempts: int = Field(0, ge=0, description="Times its application was started.")
    error: str = ""
    finished_at: float = 0.0

    @property
    def active(self) -> bool:
        return self.phase in (JobPhase.RUNNING, JobPhase.CANCELLING)


class HourDone(_Record):
    """What a backfill did with one hour of the archive."""

    events: int = Field(0, ge=0, description="Archived events of the range in the hour.")
    slices: int = Field(0, ge=0, description="Slices of the hour written, in order.")
    read: int = Field(0, ge=0, description="Archived events of the slices written.")
    delivered: int = Field(0, ge=0)
    dead_lettered: int = Field(0, ge=0)
    unreadable: int = Field(
        0, ge=0, description="Events the output cannot read now: left out, kept in the archive."
    )
    removed: int = Field(0, ge=0, description="Records taken out: events left out now.")
    done: bool = False


class _ProgressFile(BaseModel):
    """What an application of a stream's says of its work, in a file it alone writes
    (`<state>/<folder>/<stream>/<id>.json`) and control reads. A backfill's or a redrive's
    application goes on from its own; one with none yet (or one that does not read) starts
    afresh."""

    model_config = ConfigDict(extra="ignore")
    folder: ClassVar[str]

    @classmethod
    def path(cls, state_dir: Path, stream: str, job: str) -> Path:
        return state_dir / cls.folder / stream / f"{job}.json"

    @classmethod
    def load(cls, path: Path) -> Self:
        try:
            return cls.model_validate_json(path.read_bytes())
        except (OSError, ValueError):
            return cls()

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_suffix(".tmp")
        staging.write_text(self.model_dump_json())
        staging.replace(path)


class BackfillProgress(_ProgressFile):
    """Where a backfill's application is: the hours of its range, slice by slice."""

    folder = "backfills"

    total: int | None = Field(None, description="Archived events of the range, once counted.")
    hours: dict[str, HourDone] = Field(
        default_factory=dict, description="By hour, 'yyyymmddhh' (UTC)."
    )
    waiting: str = Field(
        "", description="What it waits for before it replaces an hour's rows, if anything."
    )
    done: bool = False

    @property
    def read(self) -> int:
        """Archived events of the range routed so far."""
        return sum(h.read for h in self.hours.values())

    @property
    def delivered(self) -> int:
        return sum(h.delivered for h in self.hours.values())

    @property
    def dead_lettered(self) -> int:
        return sum(h.dead_lettered for h in self.hours.values())

    @property
    def unreadable(self) -> int:
        return sum(h.unreadable for h in self.hours.values())

    @property
    def removed(self) -> int:
        return sum(h.removed for h in self.hours.values())


class ArchiveSpan(_ProgressFile):
    """Where the stream's archive begins, as its router last saw it (`<state>/archives/<stream>/
    span.json`): read by a backfill's plan, which refuses a range that begins before it (a Hive
    output's rows there, which the archive never had, would be replaced by nothing). The
    router moves it back when a batch archives an older event, and forward when it drops hours
    past retention."""

    folder = "archives"

    first: float | None = Field(
        None,
        description="When the oldest event held was ingested (epoch s, to the millisecond); the "
        "start of its hour where the router knows no better; none while it holds none.",
    )

    @classmethod
    def of(cls, state_dir: Path, stream: str) -> Path:
        return cls.path(state_dir, stream, "span")


class Selection(_Record):
    """Which dead letters a redrive sends again: those matching every field given."""

    reason: str | None = Field(None, description="The reason, exactly as listed.")
    output: str | None = Field(
        None, description="The output that refused them ('_stream': the stream could not read)."
    )
    start: int | None = Field(None, ge=0, description="Dead-lettered from, epoch ms.")
    end: int | None = Field(None, ge=0, description="Dead-lettered before, epoch ms.")


class Redrive(_Record):
    """A stream's latest redrive: its dead letters up to `until` (the dead-letter topic's end
    when it was asked) that match `selection`, sent again through the current spec, each only
    to the outputs it failed in."""

    id: str = Field(pattern=r"^rd-[0-9a-f]{12}$")
    selection: Selection
    until: dict[int, int] = Field(description="Per dead-letter partition, where it ended.")
    rate: int = Field(ge=1)
    phase: JobPhase = JobPhase.RUNNING
    requested_at: float
    by: str
    attempts: int = Field(0, ge=0)
    error: str = ""
    finished_at: float = 0.0

    @property
    def active(self) -> bool:
        return self.phase in (JobPhase.RUNNING, JobPhase.CANCELLING)


class RedriveProgress(_ProgressFile):
    """Where a redrive's application is: slices of its selection done, and what became of
    their events."""

    folder = "redrives"

    total: int | None = Field(None, description="Dead letters selected, not redriven before.")
    slices: int | None = None
    slices_done: int = 0
    read: int = 0
    delivered: dict[str, int] = Field(default_factory=dict, description="Per output.")
    dead_lettered: int = Field(0, description="Events that failed again (dead letters anew).")
    skipped: int = Field(0, description="Dead letters of outputs the stream no longer has.")
    copies: int = Field(
        0, description="Dead letters written again by a router that restarted: marked, not sent."
    )
    done: bool = False
