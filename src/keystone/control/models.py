"""The control API's bodies: what comes in (…Create, …Request) and what goes out (…Public).
The stream spec itself is the shared contract (`contracts.spec`)."""

from __future__ import annotations

import time
from abc import abstractmethod
from datetime import UTC, datetime
from typing import Any, Literal, Self

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    SecretStr,
    field_validator,
    model_validator,
)

from keystone.contracts import fronting, kafka_clients
from keystone.contracts.names import fronting_topic
from keystone.contracts.receivers import Receiver, ReceiverKind
from keystone.contracts.recovery import (
    Backfill,
    BackfillProgress,
    Job,
    Operation,
    Redrive,
    RedriveProgress,
    RestorePoint,
    Rewind,
    Selection,
    Span,
)
from keystone.contracts.registry import App, RouterPhase, RouterState
from keystone.contracts.settings import Settings
from keystone.contracts.shadows import Result
from keystone.contracts.spec import Duration, Name, OutputSpec, Principal, StreamSpec
from keystone.control.backfills import BackfillPlan
from keystone.control.deadletters import Listing
from keystone.control.fronting import View
from keystone.control.lineage import Lineage, lineage
from keystone.control.operations import JobView
from keystone.control.redrives import RedrivePlan
from keystone.control.rewinds import Plan, Progress, Target
from keystone.control.shadows import ShadowView
from keystone.control.store import AuditEntry
from keystone.control.tenancy import Caller


class RouterPublic(BaseModel):
    # A string, not the enum: a client reads a state it does not know yet (a newer control's).
    state: str = Field(description="none, pending, starting, running, stopping, restarting, failed")
    pid: int | None = None
    for_seconds: float | None = Field(None, description="How long it has been in this state.")
    restarts: int = 0
    last_error: str | None = None
    retry_in_seconds: float | None = None
    sized_for: int | None = Field(
        None, description="Events per second the fleet sized it for, from the stream's traffic."
    )
    resizes: int = Field(0, description="Times its traffic changed its size.")
    rate_per_second: float | None = Field(None, description="The stream's input now.")
    peak_per_second: float | None = Field(
        None, description="The stream's highest input rate of the last hour (10-s samples)."
    )

    @property
    def sizing(self) -> str:
        """'sized for 4,000 events/s, peak of the last hour 3,100' ('' before it is sized)."""
        if not self.sized_for:
            return ""
        return (
            f"sized for {self.sized_for:,} events/s, peak of the last hour "
            f"{self.peak_per_second or 0:,.0f}"
        )

    @classmethod
    def of(cls, state: RouterState | None, has_outputs: bool) -> RouterPublic:
        """The fleet's record, as owners see it; without one, only whether a router is due."""
        if state is None:
            return cls(state=RouterPhase.PENDING if has_outputs else RouterPhase.NONE)
        now = time.time()
        retry = {}
        if state.state in (RouterPhase.RESTARTING, RouterPhase.FAILED):
            retry["retry_in_seconds"] = max(0.0, round(state.retry_at - now, 1))
        return cls(
            state=state.state,
            pid=state.pid or None,
            for_seconds=round(now - state.since, 1) if state.since else None,
            restarts=state.restarts,
            last_error=state.last_error or None,
            sized_for=state.sized_for or None,
            resizes=state.resizes,
            rate_per_second=state.rate_per_second if state.sized_for else None,
            peak_per_second=state.peak_per_second if state.sized_for else None,
            **retry,
        )


class StreamPublic(BaseModel):
    spec: StreamSpec = Field(description="The stream spec as stored.")
    router: RouterPublic
    provisioned: list[str] = Field(
        default_factory=list, description="What this change created: topics, templates..."
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="What may not work as meant: an output reading a field the stream's schema "
        "does not declare.",
    )

    @classmethod
    def of(
        cls, spec: StreamSpec, state: RouterState | None, provisioned: list[str] | None = None
    ) -> StreamPublic:
        return cls(
            spec=spec,
            router=RouterPublic.of(state, bool(spec.outputs)),
            provisioned=provisioned or [],
            warnings=lineage(spec).warnings(),
        )


class FieldReadersPublic(BaseModel):
    output: str
    reads_in: list[Literal["filter", "projection"]] = Field(
        description="Where the output reads the field."
    )


class FieldPublic(BaseModel):
    field: str = Field(description="A dotted path into the payload.")
    declared: str | None = Field(
        description="Its type in the stream's schema (None: not declared, or no schema)."
    )
    outputs: list[FieldReadersPublic] = Field(
        description="The outputs that read it, by name (an output's running shadow as "
        "'<output> (shadow)')."
    )


class LineagePublic(BaseModel):
    """Which outputs read which of the stream's fields, beside its schema."""

    fields: list[FieldPublic]
    whole: list[str] = Field(
        description="Outputs whose projection is '*': they pass on every field, and read none "
        "by name."
    )
    unread: list[str] = Field(description="Fields the schema declares that no output reads.")
    undeclared: list[str] = Field(
        description="Fields outputs read that the schema does not declare (none without one)."
    )

    @classmethod
    def of(cls, found: Lineage) -> LineagePublic:
        return cls(
            fields=[
                FieldPublic(
                    field=use.field,
                    declared=None if use.declared is None else str(use.declared),
                    outputs=[
                        FieldReadersPublic(output=o, reads_in=w) for o, w in use.readers.items()
                    ],
                )
                for use in found.fields
            ],
            whole=found.whole,
            unread=found.unread,
            undeclared=found.undeclared,
        )


class OutputStatusPublic(BaseModel):
    name: str
    sink: str = Field(description="The sink's type.")
    guarantee: Literal["at_least_once", "exactly_once"] = Field(
        "exactly_once",
        description="What it delivers under: a crash repeats nothing (exactly_once: "
        "Elasticsearch and Hive always, Kafka and Keystone outputs in Kafka transactions when "
        "their delivery asks for it) or may repeat the records of the last moments.",
    )
    rates: dict[str, float] = Field(
        default_factory=dict, description="Events per second per stage, over the last minute."
    )
    totals: dict[str, float] = Field(
        default_factory=dict, description="Events per stage since the router started."
    )
    lag: float | None = Field(None, description="Records behind the fronting topic's end.")
    latency_p99: float | None = Field(None, description="Delivery latency's p99, seconds.")
    rewind: RewindPublic | None = Field(None, description="Its latest rewind, if any.")
    backfill: BackfillPublic | None = Field(None, description="Its latest backfill, if any.")
    shadow: ShadowPublic | None = Field(
        None, description="Its latest shadow and how it compares, if any."
    )


class RestorePointPublic(BaseModel):
    id: str = Field(description="What a rewind names it by.")
    time: datetime = Field(description="When the output had delivered every event before it.")
    generation: int = Field(description="The output's checkpoint generation (one per rewind).")
    batch: int = Field(
        description="The batch (or epoch) that committed it; -1 for where the generation started."
    )
    offsets: dict[int, int] = Field(description="Per fronting partition, the next offset.")

    @classmethod
    def of(cls, point: RestorePoint) -> RestorePointPublic:
        return cls(
            id=point.id,
            time=datetime.fromtimestamp(point.time, UTC),
            generation=point.generation,
            batch=point.batch,
            offsets=point.offsets,
        )


class RewindRequest(BaseModel):
    """Where to take the output back to: one of a restore point, a time and offsets."""

    model_config = ConfigDict(extra="forbid")

    restore_point: str | None = Field(None, description="A restore point's id.")
    to: AwareDatetime | None = Field(
        None,
        description="A time with its zone ('2026-11-25T10:00Z'): per partition, the first "
        "event at or after it (Kafka's offsets-for-times).",
    )
    offsets: dict[int, NonNegativeInt] | None = Field(
        None, description="Per fronting partition, the offset to replay from."
    )
    max_events_per_second: int | None = Field(
        None, ge=1, description="The replay's rate; default the stream's recovery setting."
    )
    dry_run: bool = Field(False, description="Only say what the rewind would do.")

    @model_validator(mode="after")
    def _one_target(self) -> RewindRequest:
        given = [n for n in ("restore_point", "to", "offsets") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of restore_point, to and offsets")
        return self

    def target(self) -> Target:
        return Target(restore_point=self.restore_point, to=self.to, offsets=self.offsets)


class SinkReplayPublic(BaseModel):
    kind: str = Field(description="idempotent, resettable or append-only")
    effect: str | None = Field(None, description="What the rewind does to this output's sink.")
    records_in_period: int | None = Field(
        None,
        description="Append-only sinks: records the output's topic took since the "
        "rewind's start (about as many are written again).",
    )


class OperationPublic(BaseModel):
    """What every recovery operation shows (a rewind, a backfill, a redrive)."""

    id: str
    stream: str
    state: str
    rate: int = Field(description="Events per second it reads at most.")
    eta_seconds: float | None = Field(None, description="Until it is done, at its rate.")
    requested_at: datetime
    by: str
    finished_at: datetime | None = None

    @staticmethod
    def fields_of(stream: str, operation: Operation) -> dict[str, Any]:
        return {
            "id": operation.id,
            "stream": stream,
            "rate": operation.rate,
            "requested_at": datetime.fromtimestamp(operation.requested_at, UTC),
            "by": operation.by,
        }

    @staticmethod
    def finished(operation: Operation) -> dict[str, Any]:
        """When it ended, for a view of it (a plan says none: `finished_at` unset)."""
        ended = operation.finished_at
        return {"finished_at": datetime.fromtimestamp(ended, UTC) if ended else None}


class JobPublic(OperationPublic):
    """A recovery operation that runs as an application of its own (a backfill, a redrive)."""

    state: str = Field(
        description="planned (a dry run), running, cancelling, done, cancelled or failed"
    )
    attempts: int = Field(0, description="Times its application was started.")
    error: str | None = None
    read: int = Field(0, description="Of its events, how many it has routed so far.")
    dead_lettered: int = Field(
        0, description="Events that failed (again): dead letters, in the dead-letter topic."
    )

    @classmethod
    def of_view(cls, stream: str, view: JobView[Any]) -> Self:
        return cls(
            **cls.job_fields(stream, view.job),
            **JobPublic.view_fields(view),
            **cls.progress_fields(view),
        )

    @staticmethod
    @abstractmethod
    def job_fields(stream: str, job: Any) -> dict[str, Any]:
        """Its kind's own fields of the job."""

    @staticmethod
    @abstractmethod
    def progress_fields(view: JobView[Any]) -> dict[str, Any]:
        """Its kind's own fields of the job's progress."""

    @staticmethod
    def view_fields(view: JobView[Any]) -> dict[str, Any]:
        """What its view says beside the job's own fields."""
        job: Job = view.job
        progress = view.progress
        return {
            **OperationPublic.finished(job),
            "state": job.phase,
            "events": progress.total,
            "read": progress.handled(),
            "dead_lettered": progress.dead_lettered_count(),
            "eta_seconds": round(view.eta_seconds, 1) if view.eta_seconds is not None else None,
            "attempts": job.attempts,
            "error": job.error or None,
        }


class RewindPublic(OperationPublic):
    output: str
    state: str = Field(description="planned (a dry run), replaying or caught_up")
    target: str = Field(description="What was asked.")
    restore_point: str | None = Field(None, description="The restore point it starts at.")
    start: dict[int, int] = Field(description="Per fronting partition, where the replay starts.")
    until: dict[int, int] = Field(
        description="Where the topic ended when it was asked: records before are replays."
    )
    committed: dict[int, int] | None = Field(
        None, description="Where the output is (for a plan: where it was)."
    )
    clusters: dict[str, Span] = Field(
        default_factory=dict,
        description="Where it replays on each other fronting cluster (start and until are home's).",
    )
    events: int = Field(description="Events of the fronting topics the replay reads.")
    replayed: int = Field(description="Of those, how many the output has committed.")
    rate: int = Field(description="Events per second the replay reads at most.")
    eta_seconds: float | None = Field(None, description="Until it has caught up, at its pace.")
    sink: SinkReplayPublic

    @classmethod
    def of_plan(cls, stream: str, plan: Plan, started: bool) -> RewindPublic:
        rewind = plan.rewind
        return cls(
            **_rewind_fields(stream, rewind),
            state="replaying" if started else "planned",
            committed=plan.position.offsets if plan.position is not None else None,
            replayed=0,
            eta_seconds=round(rewind.total / rewind.rate, 1),
            sink=SinkReplayPublic(
                kind=plan.replay, effect=plan.effect, records_in_period=plan.period_records
            ),
        )

    @classmethod
    def of_progress(cls, stream: str, progress: Progress) -> RewindPublic:
        rewind = progress.rewind
        remaining = rewind.total - progress.replayed
        eta = None
        if rewind.replaying:
            elapsed = max(1.0, time.time() - rewind.requested_at)
            pace = min(rewind.rate, progress.replayed / elapsed) or rewind.rate
            eta = round(remaining / pace, 1)
        return cls(
            **_rewind_fields(stream, rewind),
            state=rewind.phase,
            committed=progress.position.offsets if progress.position is not None else None,
            replayed=progress.replayed,
            eta_seconds=eta,
            **OperationPublic.finished(rewind),
            sink=SinkReplayPublic(kind=progress.replay),
        )


def _rewind_fields(stream: str, rewind: Rewind) -> dict[str, Any]:
    return {
        **OperationPublic.fields_of(stream, rewind),
        "output": rewind.output,
        "target": rewind.target,
        "restore_point": rewind.restore_point,
        "start": rewind.start,
        "until": rewind.until,
        "clusters": rewind.clusters,
        "events": rewind.total,
    }


class BackfillRequest(BaseModel):
    """A range of ingest time, [from, to), to route again from the stream's archive."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    start: AwareDatetime = Field(alias="from", description="With its zone: '2026-11-01T00:00Z'.")
    end: AwareDatetime = Field(alias="to", description="Exclusive; at the latest now.")
    max_events_per_second: int | None = Field(
        None, ge=1, description="Its rate; default the stream's recovery setting."
    )
    dry_run: bool = Field(False, description="Only say what the backfill would do.")


class BackfillPublic(JobPublic):
    model_config = ConfigDict(populate_by_name=True)

    output: str
    start: datetime = Field(alias="from", description="Ingest time from (inclusive).")
    end: datetime = Field(alias="to", description="Ingest time to (exclusive).")
    events: int | None = Field(None, description="Archived events of the range, once counted.")
    delivered: int = Field(0, description="Records the sink took.")
    unreadable: int = Field(
        0,
        description="Events the output cannot read now (a stricter schema, say): left out of "
        "the sink and kept in the archive, for a backfill after the fix.",
    )
    removed: int = Field(
        0, description="Records taken out of the sink: events the output leaves out now."
    )
    hours: int | None = Field(None, description="Hours of the archive it reads, once known.")
    hours_done: int = 0
    waiting: str | None = Field(
        None,
        description="What it waits for before it replaces an hour's rows (a Hive output: the "
        "live output to pass the hour's range first), if anything.",
    )
    archived_until: datetime | None = Field(
        None, description="A plan: the archive holds every event ingested before this."
    )
    sink: SinkReplayPublic

    @classmethod
    def of_plan(cls, stream: str, plan: BackfillPlan, started: bool) -> BackfillPublic:
        return cls(
            **cls.job_fields(stream, plan.backfill),
            state="running" if started else "planned",
            archived_until=datetime.fromtimestamp(plan.archived_until, UTC),
            sink=SinkReplayPublic(kind=plan.replay, effect=plan.effect),
        )

    @staticmethod
    def job_fields(stream: str, job: Backfill) -> dict[str, Any]:
        return {
            **OperationPublic.fields_of(stream, job),
            "output": job.output,
            "from": datetime.fromtimestamp(job.start / 1000, UTC),
            "to": datetime.fromtimestamp(job.end / 1000, UTC),
        }

    @staticmethod
    def progress_fields(view: JobView[Backfill]) -> dict[str, Any]:
        progress = view.progress
        assert isinstance(progress, BackfillProgress), "a backfill's progress"
        return {
            "delivered": progress.delivered,
            "unreadable": progress.unreadable,
            "removed": progress.removed,
            "hours": len(progress.hours) or None,
            "hours_done": sum(h.done for h in progress.hours.values()),
            "waiting": (progress.waiting or None) if view.job.active else None,
            "sink": SinkReplayPublic(kind=view.replay or "unknown"),
        }


class ShadowRequest(BaseModel):
    """The changed output to run as a shadow of the output of its name."""

    model_config = ConfigDict(extra="forbid")

    output: OutputSpec = Field(
        description="The output as it would be: its filter, projection or delivery changed, its "
        "sink the same (the shadow writes to targets of its own, named from the output's)."
    )
    expires_in: Duration | None = Field(
        None,
        description="How long it runs unless promoted or dropped first: '30 minutes', "
        "'2 days'; default the settings' shadow_hours.",
    )
    max_events_per_second: int | None = Field(
        None,
        ge=1,
        description="Events it reads at most a second; default the stream's recovery rate.",
    )


class ShadowMinutePublic(BaseModel):
    minute: datetime = Field(description="A minute of ingest time.")
    counts: dict[Result, int]


class ShadowDifferencePublic(BaseModel):
    guid: str
    ingested: datetime
    fields: dict[str, tuple[str | None, str | None]] = Field(
        description="Each differing field's value in the live record, then in the shadow's, as "
        "JSON text (null: the record has no such field)."
    )


class ShadowPublic(OperationPublic):
    """An output's shadow and how its records compare with the live output's, event by event."""

    state: str = Field(description="running, ending (its query stops, its targets go) or ended")
    output: str
    end: str | None = Field(None, description="promoted, dropped or expired, once it ends")
    version: OutputSpec = Field(description="The changed output the shadow runs.")
    expires_at: datetime
    start: dict[int, int] = Field(description="Where it started, per fronting partition.")
    position: dict[int, int] | None = Field(
        None, description="Where its query has committed to, per fronting partition."
    )
    targets: list[str] = Field(description="Where it writes (removed when it ends).")
    compared: int = Field(description="Events compared so far: the sum of `counts`.")
    counts: dict[Result, int] = Field(
        description="Per result: equal, differing (both keep the event, records differ), "
        "only_live, only_shadow, neither, unreadable (a dead letter of the stream)."
    )
    fields: dict[str, int] = Field(
        description="Differing events per field they differ in, most first ('(other)': past "
        "the settings' shadow_comparison_fields)."
    )
    minutes: list[ShadowMinutePublic] = Field(description="Counts per minute of ingest time.")
    samples: list[ShadowDifferencePublic] = Field(description="Differing records, newest first.")
    delivered: int = Field(description="Records its targets took.")
    dead_lettered: int = Field(description="Records its sink refused: in its dead-letter topic.")
    updated_at: datetime | None = Field(None, description="When its comparison last grew.")

    @classmethod
    def of(cls, stream: str, view: ShadowView) -> Self:
        shadow, comparison = view.shadow, view.comparison
        return cls(
            **cls.fields_of(stream, shadow),
            **cls.finished(shadow),
            state=shadow.phase.value,
            output=shadow.output,
            end=shadow.end.value if shadow.end is not None else None,
            version=shadow.version,
            expires_at=datetime.fromtimestamp(shadow.expires_at, UTC),
            start=shadow.start,
            position=view.position,
            targets=view.targets,
            compared=sum(comparison.totals.values()),
            counts={r: comparison.totals.get(r, 0) for r in Result},
            fields=dict(sorted(comparison.fields.items(), key=lambda f: (-f[1], f[0]))),
            minutes=[
                ShadowMinutePublic(
                    minute=datetime.fromtimestamp(m * 60, UTC), counts=comparison.minutes[m]
                )
                for m in sorted(comparison.minutes)
            ],
            samples=[
                ShadowDifferencePublic(
                    guid=s.guid,
                    ingested=datetime.fromtimestamp(s.timestamp / 1000, UTC),
                    fields=s.fields,
                )
                for s in comparison.samples
            ],
            delivered=comparison.delivered,
            dead_lettered=comparison.dead_lettered,
            updated_at=(
                datetime.fromtimestamp(comparison.updated_at, UTC)
                if comparison.updated_at
                else None
            ),
        )


class DeadLetterSamplePublic(BaseModel):
    partition: int
    offset: int
    time: datetime = Field(description="When it was dead-lettered.")
    guid: str | None
    event: str = Field(description="The event's first bytes, as text.")


class DeadLetterGroupPublic(BaseModel):
    output: str = Field(
        description="The output that refused them; '_stream': the stream could not read them."
    )
    reason: str
    count: int
    redriven: int = Field(description="Of them, sent again by a redrive already.")
    first: datetime
    last: datetime
    samples: list[DeadLetterSamplePublic]


class DeadLettersPublic(BaseModel):
    stream: str
    groups: list[DeadLetterGroupPublic] = Field(description="Most dead letters first.")
    scanned: int = Field(description="Dead letters read.")
    truncated: bool = Field(description="More were there than max_dead_letters_scanned.")

    @classmethod
    def of(cls, stream: str, listing: Listing) -> DeadLettersPublic:
        def when(epoch: float) -> datetime:
            return datetime.fromtimestamp(epoch, UTC)

        return cls(
            stream=stream,
            groups=[
                DeadLetterGroupPublic(
                    output=g.output,
                    reason=g.reason,
                    count=g.count,
                    redriven=g.redriven,
                    first=when(g.first),
                    last=when(g.last),
                    samples=[
                        DeadLetterSamplePublic(
                            partition=x.partition,
                            offset=x.offset,
                            time=when(x.time),
                            guid=x.guid,
                            event=x.preview,
                        )
                        for x in g.samples
                    ],
                )
                for g in listing.groups
            ],
            scanned=listing.scanned,
            truncated=listing.truncated,
        )


class RedriveRequest(BaseModel):
    """Which dead letters to send again: those matching every field given (none: all)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    reason: str | None = Field(None, description="A reason exactly as listed.")
    output: str | None = Field(
        None, description="The output that refused them; '_stream': the stream could not read."
    )
    start: AwareDatetime | None = Field(None, alias="from", description="Dead-lettered from.")
    end: AwareDatetime | None = Field(None, alias="to", description="Dead-lettered before.")
    max_events_per_second: int | None = Field(
        None, ge=1, description="Its rate; default the stream's recovery setting."
    )
    dry_run: bool = Field(False, description="Only say what the redrive would do.")

    @field_validator("start", "end")
    @classmethod
    def _after_1970(cls, when: datetime | None) -> datetime | None:
        if when is not None and when.timestamp() < 0:
            raise ValueError("a time after 1970 (Kafka's timestamps start there)")
        return when

    def selection(self) -> Selection:
        def ms(when: datetime | None) -> int | None:
            return int(when.timestamp() * 1000) if when is not None else None

        return Selection(
            reason=self.reason, output=self.output, start=ms(self.start), end=ms(self.end)
        )


class RedrivePublic(JobPublic):
    selection: dict[str, Any] = Field(description="What it sends again.")
    events: int | None = Field(
        None, description="Dead letters it sends again (not sent by a redrive before)."
    )
    outputs: dict[str, int] | None = Field(
        None, description="A plan: of those, per output they reach (the stream's go to all)."
    )
    delivered: dict[str, int] = Field(default_factory=dict, description="Per output.")
    skipped: int = Field(0, description="Dead letters of outputs the stream no longer has.")
    copies: int = Field(
        0,
        description="Second copies of a dead letter (a router that restarted wrote it again): "
        "marked redriven, not sent again.",
    )
    truncated: bool = Field(
        False, description="A plan counted from the first max_dead_letters_scanned only."
    )

    @classmethod
    def of_plan(cls, stream: str, plan: RedrivePlan, started: bool) -> RedrivePublic:
        return cls(
            **cls.job_fields(stream, plan.redrive),
            state=plan.redrive.phase if started else "planned",
            events=plan.events,
            outputs=plan.outputs,
            skipped=plan.skipped,
            copies=plan.copies,
            truncated=plan.truncated,
        )

    @staticmethod
    def job_fields(stream: str, job: Redrive) -> dict[str, Any]:
        return {
            **OperationPublic.fields_of(stream, job),
            "selection": job.selection.model_dump(exclude_none=True),
        }

    @staticmethod
    def progress_fields(view: JobView[Redrive]) -> dict[str, Any]:
        progress = view.progress
        assert isinstance(progress, RedriveProgress), "a redrive's progress"
        return {
            "delivered": progress.delivered,
            "skipped": progress.skipped,
            "copies": progress.copies,
        }


class FrontingPublicStream(BaseModel):
    """The fronting cluster that takes a stream's writes now."""

    cluster: str
    home: bool = Field(description="Whether it is home (the first of the settings').")
    alone: bool = Field(description="Switched for this stream alone, not with every stream.")
    since: float | None = Field(description="When the writes last moved (epoch seconds).")
    reason: str | None = Field(description="Why: command, unreachable or recovered.")


class AlertPublic(BaseModel):
    """One of the stream's alerts Alertmanager holds, and who hears it."""

    alert: str
    state: str = Field(description="firing, silenced or inhibited (nobody is notified)")
    output: str | None = None
    since: str = Field(description="When it began firing (RFC 3339).")
    summary: str = ""
    receivers: list[str] = Field(
        description="Whom it is routed to: owner-<owner> (the owner's receivers), "
        "keystone-admin (the admin's)."
    )
    silenced_by: list[str] = Field(default_factory=list, description="Silences' ids.")

    @classmethod
    def of(cls, alert: dict[str, Any]) -> AlertPublic:
        status = alert.get("status", {})
        state = "firing"
        if status.get("state") == "suppressed":
            state = "silenced" if status.get("silencedBy") else "inhibited"
        labels = alert.get("labels", {})
        return cls(
            alert=labels.get("alertname", ""),
            state=state,
            output=labels.get("output"),
            since=alert.get("startsAt", ""),
            summary=alert.get("annotations", {}).get("summary", ""),
            receivers=[r["name"] for r in alert.get("receivers", [])],
            silenced_by=status.get("silencedBy") or [],
        )


class StatusPublic(BaseModel):
    """A stream's router, as the fleet sees it, and its outputs as Prometheus last scraped
    them (an output's figures are missing until the router has run)."""

    stream: str
    router: RouterPublic
    outputs: list[OutputStatusPublic]
    archive: OutputStatusPublic | None = Field(
        None, description="The stream's archive (written like a Hive output), if it keeps one."
    )
    redrive: RedrivePublic | None = Field(
        None, description="The stream's latest redrive of dead letters, if any."
    )
    metrics_error: str | None = Field(None, description="Why the figures are missing, if so.")
    fronting: FrontingPublicStream | None = Field(
        None, description="The fronting cluster taking its writes, where there are several."
    )
    alerts: list[AlertPublic] = Field(
        default_factory=list, description="Its alerts Alertmanager holds, firing or not heard."
    )
    alerts_error: str | None = Field(None, description="Why the alerts are missing, if so.")


class FrontingClusterPublic(BaseModel):
    name: str
    home: bool = Field(description="The first of the settings': active unless switched.")
    brokers: str
    problem: str | None = Field(description="Why it cannot take writes now; null when it can.")


class FrontingSwitchCount(BaseModel):
    from_cluster: str = Field(alias="from")
    to: str
    reason: str = Field(description="command, unreachable (the fleet's failover) or recovered.")
    count: int

    model_config = ConfigDict(populate_by_name=True)


class FrontingPublic(BaseModel):
    """The fronting clusters, and which takes writes: `active` for every stream but those
    `streams` names."""

    clusters: list[FrontingClusterPublic]
    active: str
    streams: dict[str, str] = Field(description="Streams whose writes another cluster takes.")
    since: float = Field(description="When it last switched (epoch seconds; 0: never).")
    reason: str
    switches: list[FrontingSwitchCount] = Field(description="So far (the admin's view only).")

    @classmethod
    def of(cls, view: View) -> Self:
        return cls(
            clusters=[
                FrontingClusterPublic(
                    name=c.name, home=c.home, brokers=c.brokers, problem=c.problem
                )
                for c in view.clusters
            ],
            active=view.active.cluster,
            streams=view.active.streams,
            since=view.active.since,
            reason=view.active.reason,
            switches=[
                FrontingSwitchCount(**{"from": f, "to": t, "reason": r, "count": n})
                for (f, t, r), n in sorted(view.switches.items())
            ],
        )


class FrontingSwitch(BaseModel):
    """A failover (`to` a cluster) or, with `to` null, a failback to home."""

    to: str | None = Field(None, description="The cluster to take the writes; null: home.")
    stream: str | None = Field(None, description="One stream's writes; null: every stream's.")

    model_config = ConfigDict(extra="forbid")


class ReceiverCreate(BaseModel):
    """Where the caller's alerts go: a webhook (Alertmanager's JSON, POSTed), a Slack-compatible
    webhook, or an e-mail address."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    kind: ReceiverKind
    url: SecretStr | None = Field(
        None,
        max_length=2048,
        description="A webhook's or Slack's URL (their kinds need it); a secret: never shown "
        "again. Its scheme and host are checked against alert_receiver_schemes and "
        "alert_receiver_networks.",
    )
    to: str | None = Field(
        None, max_length=254, description="An e-mail receiver's address (its kind needs it)."
    )
    channel: str | None = Field(
        None,
        pattern=r"^[#@][A-Za-z0-9._-]{1,80}$",
        description="A Slack receiver's channel ('#data') or user ('@me').",
    )
    send_resolved: bool = Field(True, description="Say so too when an alert is resolved.")

    @model_validator(mode="after")
    def _addressed(self) -> ReceiverCreate:
        needs = "to" if self.kind is ReceiverKind.EMAIL else "url"
        if not getattr(self, needs):
            raise ValueError(f"a {self.kind} receiver needs {needs}")
        other = "url" if needs == "to" else "to"
        if getattr(self, other):
            raise ValueError(f"a {self.kind} receiver takes no {other}")
        if self.channel and self.kind is not ReceiverKind.SLACK:
            raise ValueError("only a slack receiver takes a channel")
        return self

    def receiver(self) -> Receiver:
        """As the registry keeps it (its owner set by the caller's)."""
        return Receiver(
            name=self.name,
            owner="",
            kind=self.kind,
            url=self.url.get_secret_value() if self.url is not None else "",
            to=self.to or "",
            channel=self.channel or "",
            send_resolved=self.send_resolved,
        )


class ReceiverPublic(BaseModel):
    name: str
    owner: str
    kind: ReceiverKind
    where: str = Field(description="Where it sends: a URL's scheme and host only.")
    channel: str | None = None
    send_resolved: bool
    created: float

    @classmethod
    def of(cls, receiver: Receiver) -> ReceiverPublic:
        return cls(
            name=receiver.name,
            owner=receiver.owner,
            kind=receiver.kind,
            where=receiver.where,
            channel=receiver.channel or None,
            send_resolved=receiver.send_resolved,
            created=receiver.created,
        )


class SilenceCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    alert: str | None = Field(
        None, description="The alert to silence, by name (none: every alert of the stream)."
    )
    hours: float = Field(
        gt=0, allow_inf_nan=False, description="How long, at most max_silence_hours."
    )
    comment: str = Field("", max_length=500, description="Why, for whoever reads it later.")


class SilencePublic(BaseModel):
    id: str
    stream: str
    alert: str | None = Field(None, description="The alert silenced (none: every one).")
    state: str = Field(description="active or pending (from a later start)")
    starts_at: str
    ends_at: str
    created_by: str
    comment: str

    @classmethod
    def of(cls, stream: str, silence: dict[str, Any]) -> SilencePublic:
        names = {m["name"]: m["value"] for m in silence.get("matchers", [])}
        return cls(
            id=silence["id"],
            stream=stream,
            alert=names.get("alertname"),
            state=silence.get("status", {}).get("state", ""),
            starts_at=silence.get("startsAt", ""),
            ends_at=silence.get("endsAt", ""),
            created_by=silence.get("createdBy", ""),
            comment=silence.get("comment", ""),
        )


class AppCreate(BaseModel):
    name: Principal
    rate: int | None = Field(
        None,
        ge=0,
        description="Quota in events per second. Default: none (0) for the admin's apps, "
        "max_app_rate for an owner's; only the admin may give 0 (none).",
    )


class AppPublic(BaseModel):
    name: str
    owner: str
    rate: int
    created: float
    streams: list[str] = Field(description="Streams it may post to.")
    kafka_user: str | None = Field(
        None, description="Its own Kafka user, if it holds a credential to write directly."
    )

    @classmethod
    def of(cls, app: App, streams: list[StreamSpec]) -> AppPublic:
        return cls(
            name=app.name,
            owner=app.owner or "admin",
            rate=app.rate,
            created=app.created,
            streams=[s.name for s in streams if app.name in s.producers],
            kafka_user=kafka_clients.app_user(app.name) if app.kafka else None,
        )

    @classmethod
    def seen_by(cls, app: App, streams: list[StreamSpec], caller: Caller) -> AppPublic:
        """The app with only the grants of streams the caller owns: another owner's stream
        that lets the app post is theirs to know of."""
        return cls.of(app, [s for s in streams if caller.owns(s.owner)])


class AppKey(BaseModel):
    name: str
    key: str = Field(description="Shown only now: it is stored hashed.")
    rate: int | None = None
    kafka_password: str | None = Field(
        None, description="The app's new Kafka password, if it holds a credential: shown only now."
    )


class KafkaCredential(BaseModel):
    """How an app writes straight to Kafka: its own user, which may write the fronting topics
    of the streams it is granted, and nothing else."""

    app: str
    username: str
    password: str = Field(description="Shown only now: Kafka keeps its salted hash only.")
    mechanism: str
    security_protocol: str
    bootstrap_servers: str = Field(description="The home fronting cluster's brokers.")
    clusters: dict[str, str] = Field(
        description="Each fronting cluster's brokers, by name: the user is on every one; a "
        "stream's events go to the one that takes its writes now (GET /v1/fronting)."
    )
    topics: list[str] = Field(description="The fronting topics it may write now.")

    @classmethod
    def of(
        cls, app: str, password: str, settings: Settings, streams: list[StreamSpec]
    ) -> KafkaCredential:
        return cls(
            app=app,
            username=kafka_clients.app_user(app),
            password=password,
            mechanism=settings.kafka_sasl_mechanism,
            security_protocol=kafka_clients.protocol(settings),
            bootstrap_servers=fronting.home(settings).connect(settings).kafka_bootstrap,
            clusters={
                c.name: c.connect(settings).kafka_bootstrap for c in fronting.clusters(settings)
            },
            topics=[fronting_topic(s.name) for s in streams if app in s.producers],
        )


class OwnerCreate(BaseModel):
    name: Principal


class OwnerToken(BaseModel):
    name: str
    token: str = Field(description="Shown only now: it is stored hashed.")


class PreviewRequest(BaseModel):
    filter: str | None = Field(None, description="Default: the output's, if it exists.")
    projection: list[str] | None = Field(
        None, min_length=1, description="Default: the output's, or *."
    )
    limit: int = Field(20, ge=1, le=1000, description="How many of the newest events to read.")
    shadow: bool = Field(
        False,
        description="Start from the output's running shadow's filter and projection instead "
        "of the output's.",
    )


class PreviewPublic(BaseModel):
    scanned: int
    matched: int
    unreadable: int
    records: list[dict[str, Any]] = Field(
        description="Each matching event: its guid, timestamp, the event (its payload) and the "
        "record the output would write of it (a number beyond a double shown as the string "
        "'Infinity')."
    )
    problems: list[dict[str, Any]]
    computed: list[str] = Field(
        default_factory=list,
        description="The record's fields a function makes (hashed, masked, computed).",
    )


class AuditPublic(BaseModel):
    id: str
    at: float
    who: str
    action: str
    target: str
    owner: str = Field(description="Whose the target was when it changed.")
    detail: dict[str, Any]

    @classmethod
    def of(cls, entry: AuditEntry) -> AuditPublic:
        return cls(**entry.__dict__)
