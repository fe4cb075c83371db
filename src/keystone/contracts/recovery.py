"""Recovery as control keeps it in the registry and the router reads it: restore points, and
the three operations that repair an output, each recorded as an `Operation` (the registry keeps
an output's latest of each kind, or a stream's latest redrive).

A **restore point** is a position an output committed (`contracts.checkpoints.Commit`) with the
generation and query it belongs to; control collects them from the output's checkpoint and thins
old ones (`thin`). A **rewind** takes one output back to a position: the router starts the
output's next checkpoint generation there, replays at a bounded rate until it reaches `until`
(where the fronting topic ended when the rewind was asked), labels what it writes again to Kafka
with `ks_replay`, and has a Hive output replace the batches the rewind undoes (`replaced`). A
stream read from several fronting clusters is rewound on each, to the same moment: the output's
query on every other cluster replays its own `Span` of the topic there (`Rewind.on`), and the
rewind has caught up once each has.

A **backfill** routes a time range of the stream's archive through one output's current spec,
and a **redrive** sends a stream's dead letters again through its current spec: each is a `Job`,
an application of its own that the fleet starts and watches, and that records how far it has
come in a progress file (`JobProgress`).
"""

from __future__ import annotations

import re
import secrets
from abc import abstractmethod
from enum import StrEnum
from pathlib import Path
from typing import ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator

from keystone.contracts.checkpoints import Offsets
from keystone.contracts.errors import Conflict
from keystone.contracts.fronting import FrontingCluster

DENSE_SECONDS = 3600.0  # every restore point of the last hour is kept
SPARSE_SECONDS = 300.0  # older ones: the last of every five minutes


class _Record(BaseModel):
    # Read back from Redis, which anyone who can write there could have written: checked.
    model_config = ConfigDict(extra="ignore", frozen=True)


class RestorePoint(_Record):
    id: str = Field(
        description="'<generation>-<batch>' ('<generation>-start' where it began; '@<cluster>' "
        "after it for another fronting cluster's query than home's), stable while the point is "
        "kept."
    )
    time: float = Field(description="When the output had delivered everything before it.")
    generation: int = Field(ge=0)
    batch: int = Field(ge=-1, description="-1: where the generation started.")
    query: str = Field("", description="The streaming query that committed it.")
    offsets: Offsets
    cluster: str = Field(
        "", description="The fronting cluster the query reads, its topic's offsets ('': home)."
    )

    @staticmethod
    def make_id(generation: int, batch: int, cluster: str = "") -> str:
        where = f"@{cluster}" if cluster else ""
        return f"{generation}-{batch if batch >= 0 else 'start'}{where}"

    def before(self, offsets: Offsets) -> bool:
        """Whether this point is at or before `offsets` in every partition."""
        return all(offsets.get(p, 0) >= o for p, o in self.offsets.items())


class Operation(_Record):
    """What every recovery operation records. `kind` names it: the registry's key and the
    folders of its applications and progress (`rewinds`, `backfills`, `redrives`), and its
    ids' prefix."""

    kind: ClassVar[str]
    prefix: ClassVar[str]
    per_output: ClassVar[bool] = True  # one of an output's at a time (else of a stream's)
    excludes: ClassVar[tuple[str, ...]] = ()  # kinds it does not run beside, on one output
    doing: ClassVar[str]  # what its output (or stream) does while it is under way: "{id}"'s
    ends: ClassVar[str]  # when another waits for
    never: ClassVar[str]  # of an output (or stream) that has had none

    id: str
    rate: int = Field(ge=1, description="Events per second read at most.")
    requested_at: float
    by: str
    finished_at: float = 0.0

    @field_validator("id")
    @classmethod
    def _own_id(cls, value: str) -> str:
        if not re.fullmatch(rf"{cls.prefix}-[0-9a-f]{{12}}", value):
            raise ValueError(f"a {cls.noun()} id is '{cls.prefix}-' and 12 hex digits")
        return value

    @classmethod
    def new_id(cls) -> str:
        return f"{cls.prefix}-{secrets.token_hex(6)}"

    @classmethod
    def noun(cls) -> str:
        return cls.kind.removesuffix("s")

    @property
    @abstractmethod
    def active(self) -> bool:
        """Under way: no other of its kind (or one it excludes) starts on the same output (or
        stream) meanwhile."""

    def refusal(self, asking: type[Operation], stream: str, output: str | None) -> Conflict | None:
        """Why an operation of kind `asking` may not start where this one is (it is the latest
        of `asking`'s kind there, or of a kind `asking` excludes), if it may not."""
        if not self.active:
            return None
        where = f"output {stream}.{output}" if output is not None else f"stream {stream!r}"
        doing = f"{where} {self.doing.format(id=self.id)}"
        if isinstance(self, asking):
            unit = "output" if asking.per_output else "stream"
            message = f"{doing}: one {asking.noun()} per {unit} at a time"
            if isinstance(self, Job):
                message += "; cancel it first"
        else:
            message = f"{doing}: a {asking.noun()} waits until it has {self.ends}"
        return Conflict(message, **{self.noun(): self.id})


class RewindPhase(StrEnum):
    REPLAYING = "replaying"  # rate limited, until it reaches `until`
    CAUGHT_UP = "caught_up"  # running as usual again


class Replaced(_Record):
    """Batches a rewind undoes: the query's batches after `after` (-1: all of them)."""

    query: str
    after: int = Field(ge=-1)
    cluster: str = Field(
        "",
        description="The fronting cluster its query reads ('': home): each cluster's query "
        "removes its own as its replay reaches them.",
    )


class Span(_Record):
    """A rewind's replay on a fronting cluster but home: its topic there, from `start` to
    `until` (where it ended when the rewind was asked)."""

    start: Offsets
    until: Offsets


class Rewind(Operation):
    """One output's latest rewind; `generation` is the checkpoint generation it started (on
    every fronting cluster it reaches). `start` and `until` are home's topic's."""

    kind = "rewinds"
    prefix = "rw"
    excludes = ("backfills",)
    doing = "is replaying rewind {id}"
    never = "has not been rewound"
    ends = "caught up"

    output: str
    generation: int = Field(ge=1)
    start: Offsets
    until: Offsets
    replaced: list[Replaced] = Field(default_factory=list)
    phase: RewindPhase = RewindPhase.REPLAYING
    target: str = Field(description="What was asked: a restore point, a time or offsets.")
    restore_point: str | None = None
    total: int = Field(
        ge=0, description="Records of the fronting topic the replay reads (on every cluster)."
    )
    clusters: dict[str, Span] = Field(
        default_factory=dict,
        description="Its replay on each other fronting cluster, by name: a cluster named in "
        "settings since is not rewound.",
    )
    caught_up_on: list[str] = Field(
        default_factory=list,
        description="The clusters whose replay has caught up ('': home), each running as usual "
        "again; the rewind has caught up (`phase`) once every one it reaches has.",
    )

    @property
    def active(self) -> bool:
        return self.replaying

    def on(self, cluster: str | None) -> Rewind | None:
        """The rewind as the output's query on `cluster` (None: home) runs it: that topic's
        start and until, that cluster's batches to replace, replaying until that cluster has
        caught up; None on a cluster it does not reach."""
        where = cluster or ""
        span = Span(start=self.start, until=self.until) if cluster is None else None
        span = span or self.clusters.get(where)
        if span is None:
            return None
        done = not self.replaying or where in self.caught_up_on
        return self.model_copy(
            update={
                "start": span.start,
                "until": span.until,
                "replaced": [r for r in self.replaced if r.cluster == where],
                "phase": RewindPhase.CAUGHT_UP if done else RewindPhase.REPLAYING,
                "clusters": {},
                "caught_up_on": [],
            }
        )

    def at(self, cluster: FrontingCluster) -> Rewind | None:
        return self.on(None if cluster.home else cluster.name)

    @property
    def empty(self) -> bool:
        """Nothing to replay (on this view's cluster)."""
        return all(u <= self.start.get(p, 0) for p, u in self.until.items())

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
    rewind to before it knows which files to replace. Each fronting cluster's points are thinned
    apart: a rewind aligns them by time."""
    drop = []
    newest_in: dict[tuple[str, int, int], RestorePoint] = {}
    for cluster in {p.cluster for p in points}:
        ordered = sorted((p for p in points if p.cluster == cluster), key=lambda p: p.time)
        # The newest is kept whatever its age: an idle output commits nothing new, and is still
        # exactly there. So is, on another cluster than home, the newest past retention: a
        # standby idles between failovers, and where it was then is where it is all along.
        last_past = None
        if cluster:
            past = [p for p in ordered[:-1] if now - p.time > keep_seconds]
            last_past = past[-1] if past else None
        for point in ordered[:-1]:
            age = now - point.time
            if age > keep_seconds:
                if point is not last_past:
                    drop.append(point)
            elif age > DENSE_SECONDS:
                bucket = (cluster, point.generation, int(point.time // SPARSE_SECONDS))
                earlier = newest_in.get(bucket)
                if earlier is not None:
                    drop.append(earlier)
                newest_in[bucket] = point
    return drop


class JobPhase(StrEnum):
    """A job's: each runs as an application of its own."""

    RUNNING = "running"  # its application runs (or the fleet starts it again)
    CANCELLING = "cancelling"  # asked to stop: the fleet stops its application
    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"  # its application failed too often in a row


class StateFile(BaseModel):
    """What an application of a stream's says of its work, in a file it alone writes
    (`<state>/<folder>/<stream>/<name>.json`) and control reads; one that does not read (or is
    not there yet) is a fresh one."""

    model_config = ConfigDict(extra="ignore")
    folder: ClassVar[str]

    @classmethod
    def path(cls, state_dir: Path, stream: str, name: str) -> Path:
        return state_dir / cls.folder / stream / f"{name}.json"

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


class JobProgress(StateFile):
    """Where a job's application is, by the job's id: it goes on from there when started again
    (afresh with none yet)."""

    total: int | None = Field(None, description="Events it routes, once counted.")
    done: bool = False

    @abstractmethod
    def handled(self) -> int:
        """Of `total`, how many it has routed so far."""

    @abstractmethod
    def dead_lettered_count(self) -> int:
        """Events that failed (again): dead letters."""

    def eta_seconds(self, job: Job) -> float | None:
        """Until it is done at the job's rate, while it runs and its total is known."""
        if not job.active or self.total is None:
            return None
        return max(0, self.total - self.handled()) / job.rate


# What runs any job's application: `python -m keystone.router.jobs --stream <s> --id <id>`.
JOBS_MODULE = "keystone.router.jobs"


class Job(Operation):
    """An operation that runs as a Spark application of its own (`JOBS_MODULE`), which
    control's fleet starts, starts again where it stopped, and ends: done once its progress
    says so, cancelled, or failed."""

    progress: ClassVar[type[JobProgress]]

    ends = "finished or been cancelled"

    phase: JobPhase = JobPhase.RUNNING
    attempts: int = Field(0, ge=0, description="Times its application was started.")
    error: str = ""

    @property
    def active(self) -> bool:
        return self.phase in (JobPhase.RUNNING, JobPhase.CANCELLING)

    def progress_of(self, state_dir: Path, stream: str) -> JobProgress:
        return self.progress.load(self.progress.path(state_dir, stream, self.id))


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


class BackfillProgress(JobProgress):
    """Where a backfill's application is: the hours of its range, slice by slice."""

    folder = "backfills"

    total: int | None = Field(None, description="Archived events of the range, once counted.")
    hours: dict[str, HourDone] = Field(
        default_factory=dict, description="By hour, 'yyyymmddhh' (UTC)."
    )
    waiting: str = Field(
        "", description="What it waits for before it replaces an hour's rows, if anything."
    )

    def handled(self) -> int:
        return self.read

    def dead_lettered_count(self) -> int:
        return self.dead_lettered

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


class Backfill(Job):
    """One output's latest backfill: its events ingested in [start, end), read again from the
    stream's archive and routed through the output's spec as it is now, as an application
    of its own beside the router."""

    kind = "backfills"
    prefix = "bf"
    excludes = ("rewinds",)
    doing = "is being backfilled ({id})"
    never = "has not been backfilled"
    progress = BackfillProgress

    output: str
    start: int = Field(ge=0, description="Ingest time from, epoch ms (inclusive).")
    end: int = Field(ge=0, description="Ingest time to, epoch ms (exclusive).")


class ArchiveSpan(StateFile):
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


class RedriveProgress(JobProgress):
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

    def handled(self) -> int:
        return self.read

    def dead_lettered_count(self) -> int:
        return self.dead_lettered


class Redrive(Job):
    """A stream's latest redrive: its dead letters up to `until` (the dead-letter topic's end
    when it was asked) that match `selection`, sent again through the current spec, each only
    to the outputs it failed in."""

    kind = "redrives"
    prefix = "rd"
    doing = "is redriving its dead letters ({id})"
    never = "has not redriven its dead letters"
    per_output = False
    progress = RedriveProgress

    selection: Selection
    until: dict[int, int] = Field(description="Per dead-letter partition, where it ended.")


# Every kind of operation, by its `kind`.
OPERATIONS: dict[str, type[Operation]] = {k.kind: k for k in (Rewind, Backfill, Redrive)}


def check_free(
    asking: type[Operation], stream: str, output: str | None, latest: list[Operation | None]
) -> None:
    """409 if an operation of kind `asking` may not start on the output (or the stream) now:
    `latest` is its latest of `asking`'s kind and of each kind `asking` excludes there."""
    for record in latest:
        refused = record.refusal(asking, stream, output) if record is not None else None
        if refused is not None:
            raise refused
