"""A shadow of an output: a changed version of it (its filter, projection, delivery) that runs
beside the live one on the same events, into targets of its own, compared with it event by
event (by guid) until the owner promotes it, drops it, or it expires.

Control keeps a `Shadow` record per output (the latest, as it keeps an output's latest rewind)
and the router reads it every second: while the shadow runs, the router runs one more query,
the shadow's (its key is the shadow's id), from where the live output's query had got to when
the shadow was asked (`start`). For every event that query reads it applies both versions, the
live output's and the shadow's, as compiled for Spark, and counts what became of it
(`Result`); it writes the shadow's records to the shadow's targets (`contracts.names.shadow_*`:
never the live output's, never another stream), and keeps the counts in its `Comparison` file.

A shadow ends promoted (its version becomes the live output's, in the same registry step),
dropped or expired: the router stops its query and says so (`stopped_path`), then control
removes the shadow's targets and marks it `ended`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from keystone.contracts.checkpoints import Offsets
from keystone.contracts.errors import Conflict
from keystone.contracts.limits import Limits
from keystone.contracts.recovery import Operation, StateFile
from keystone.contracts.spec import OutputSpec, StreamSpec


class ShadowPhase(StrEnum):
    RUNNING = "running"  # its query runs in the router, beside the live output's
    ENDING = "ending"  # promoted, dropped or expired: its query stops, then its targets go
    ENDED = "ended"  # its targets are gone


class ShadowEnd(StrEnum):
    PROMOTED = "promoted"
    DROPPED = "dropped"
    EXPIRED = "expired"


class Shadow(Operation):
    """One output's latest shadow. Not a repair: no rewind, backfill or redrive waits for it,
    nor it for them (`contracts.recovery.OPERATIONS` lists the repairs)."""

    kind = "shadows"
    prefix = "sh"
    doing = "has shadow {id} running"
    ends = "ended (promoted, dropped or expired)"
    never = "has had no shadow"

    output: str
    version: OutputSpec = Field(description="The changed output the shadow runs.")
    live: OutputSpec = Field(
        description="The output it is compared with, as it was when the shadow was asked (it "
        "stays so while the shadow runs): a router whose spec says otherwise (not yet "
        "deployed again) runs none of it."
    )
    start: Offsets = Field(
        description="Where its query starts on home's fronting topic: where the live output's "
        "had got to when the shadow was asked."
    )
    expires_at: float
    phase: ShadowPhase = ShadowPhase.RUNNING
    end: ShadowEnd | None = None

    @property
    def active(self) -> bool:
        """Until its targets are gone: a second shadow of the output waits that long."""
        return self.phase is not ShadowPhase.ENDED

    @property
    def running(self) -> bool:
        return self.phase is ShadowPhase.RUNNING

    def expired(self, now: float) -> bool:
        return self.running and now >= self.expires_at

    @staticmethod
    def is_key(key: str) -> bool:
        """Whether a router's query key is a shadow's (its id: '-' is in no output's name)."""
        return key.startswith(f"{Shadow.prefix}-")


class Result(StrEnum):
    """What became of one event the shadow's query read, both versions applied."""

    EQUAL = "equal"  # both keep it, with the same record
    DIFFERING = "differing"  # both keep it, with records that differ
    ONLY_LIVE = "only_live"  # the live output keeps it, the shadow leaves it out
    ONLY_SHADOW = "only_shadow"  # the shadow keeps it, the live output leaves it out
    NEITHER = "neither"  # both leave it out
    UNREADABLE = "unreadable"  # neither can read it: one of the stream's dead letters


OTHER_FIELDS = "(other)"  # the differing fields past the ones a comparison names


class Difference(BaseModel):
    """One event whose records differ: which top-level fields, and their values before (the
    live output's) and after (the shadow's), as JSON text (null: the record has no such
    field)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    guid: str
    timestamp: int
    fields: dict[str, tuple[str | None, str | None]]


class BatchComparison(BaseModel):
    """What one batch of the shadow's query counted (the router's, for `Comparison.add`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    minutes: dict[int, dict[Result, int]] = Field(default_factory=dict)  # by ingest minute
    fields: dict[str, int] = Field(default_factory=dict)  # differing records, by field
    samples: list[Difference] = Field(default_factory=list)
    delivered: int = 0  # records the shadow's sink took
    dead_lettered: int = 0  # records it could not (in the shadow's dead-letter topic)
    position: Offsets = Field(default_factory=dict)  # where the batch ended


class Comparison(StateFile):
    """A shadow's comparison so far, written by its query after each batch it delivered and
    read by control. A batch counted once: one run again after a crash (its id at or below
    `batch`) is not counted again. Bounded (`ShadowBounds`): the newest minutes, the first
    fields to differ and the newest samples are kept."""

    folder = "shadows"

    batch: int = -1  # the newest batch counted
    totals: dict[Result, int] = Field(default_factory=dict)
    minutes: dict[int, dict[Result, int]] = Field(default_factory=dict)  # epoch minute of ingest
    fields: dict[str, int] = Field(default_factory=dict)
    samples: list[Difference] = Field(default_factory=list)  # newest first
    delivered: int = 0
    dead_lettered: int = 0
    position: Offsets = Field(default_factory=dict)
    updated_at: float = 0.0

    def add(
        self, batch_id: int, batch: BatchComparison, bounds: ShadowBounds, now: float
    ) -> Comparison:
        """This comparison with batch `batch_id`'s counts added (unchanged if it has them)."""
        if batch_id <= self.batch:
            return self
        totals = dict(self.totals)
        minutes = {m: dict(c) for m, c in self.minutes.items()}
        for minute, counts in batch.minutes.items():
            into = minutes.setdefault(minute, {})
            for result, n in counts.items():
                totals[result] = totals.get(result, 0) + n
                into[result] = into.get(result, 0) + n
        kept = sorted(minutes)[-bounds.minutes :]
        fields = dict(self.fields)
        for field, n in sorted(batch.fields.items(), key=lambda f: (-f[1], f[0])):
            named = field if field in fields or len(fields) < bounds.fields else OTHER_FIELDS
            fields[named] = fields.get(named, 0) + n
        return Comparison(
            batch=batch_id,
            totals=totals,
            minutes={m: minutes[m] for m in kept},
            fields=fields,
            samples=(batch.samples + self.samples)[: bounds.samples],
            delivered=self.delivered + batch.delivered,
            dead_lettered=self.dead_lettered + batch.dead_lettered,
            position=batch.position or self.position,
            updated_at=now,
        )


@dataclass(frozen=True)
class ShadowBounds:
    """What a comparison keeps at most (`contracts.limits.Limits.shadow_comparison_*`)."""

    minutes: int
    fields: int
    samples: int

    @classmethod
    def of(cls, limits: Limits) -> ShadowBounds:
        return cls(
            limits.shadow_comparison_minutes,
            limits.shadow_comparison_fields,
            limits.shadow_comparison_samples,
        )


def comparison_path(state_dir: Path, stream: str, shadow: str) -> Path:
    return Comparison.path(state_dir, stream, shadow)


def stopped_path(state_dir: Path, stream: str, shadow: str) -> Path:
    """Written by the router once it runs no query for the ended shadow, nor ever will: then
    its targets may go."""
    return state_dir / Comparison.folder / stream / f"{shadow}.stopped"


def change_refusal(
    old: StreamSpec | None,
    new: StreamSpec | None,
    shadows: dict[str, Shadow],
    promoting: Shadow | None = None,
) -> Conflict | None:
    """Why a stream's spec may not go from `old` to `new` while its outputs have `shadows` (each
    output's latest), if it may not: a shadow compares its version with the live output as it
    was when it started, so while one runs its output may not change (but by its promotion,
    `promoting`, to its version exactly), nor the stream's schema; and a stream keeps its
    shadows' records until their targets are gone, so it is not deleted before."""
    if old is None:
        return None
    if new is None:
        active = sorted(s.id for s in shadows.values() if s.active)
        if active:
            return Conflict(
                f"stream {old.name!r} has shadows ({', '.join(active)}) not ended yet: "
                "promote or drop them, then delete it once they have ended",
                shadows=active,
            )
        return None
    running = {o: s for o, s in shadows.items() if s.running}
    if running and old.avro_schema != new.avro_schema:
        return Conflict(
            f"stream {old.name!r} has shadows running ({', '.join(sorted(running))}): its "
            "schema changes once they are promoted or dropped",
            shadows=sorted(s.id for s in running.values()),
        )
    for output, shadow in sorted(running.items()):
        now = new.output(output)
        if now == old.output(output):
            continue
        if promoting is not None and promoting.id == shadow.id and now == shadow.version:
            continue
        return Conflict(
            f"output {old.name}.{output} has shadow {shadow.id} running: promote or drop it "
            "before changing the output",
            shadow=shadow.id,
        )
    return None
