"""Backfills: an output's events of a time range routed again from the stream's archive.

`Backfills` is what owners ask (API, CLI, UI): `plan` checks a range and says what each sink
will do with it, `start` records the backfill (one per output at a time, in the audit log),
`cancel` asks it to stop, `progress` says how far it has come. `BackfillRuns` is the fleet's
side, each pass (`keystone.control.recovery`): it has the backfill's application
(`python -m keystone.router.backfill`) run until it is done (`keystone.control.jobs`).

A range must lie within what the archive holds: after the retention's start and the archive's
first event (`ArchiveSpan`, which its router keeps), and before the archive's last write (an
event of the range the archive has yet to write would be missed; and a Hive output's hours are
replaced whole by what the archive has).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from keystone.contracts.checkpoints import latest
from keystone.contracts.errors import Conflict, KeystoneError, NotFound, Unprocessable
from keystone.contracts.limits import check_replay_rate
from keystone.contracts.names import ARCHIVE_QUERY, HIVE_DATABASE, archive_table, fronting_topic
from keystone.contracts.recovery import ArchiveSpan, Backfill, BackfillProgress, JobPhase
from keystone.contracts.settings import Settings
from keystone.contracts.spec import OutputSpec, StreamSpec
from keystone.control.jobs import Job, JobRuns
from keystone.control.positions import Positions
from keystone.control.store import Store, audit, check_not_replaying
from keystone.control.streams import Streams
from keystone.control.tenancy import Caller
from keystone.router.sinks.registry import SINKS, Replay

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BackfillPlan:
    backfill: Backfill
    replay: Replay  # what the sink does with records written again
    effect: str  # that, in words, for this output
    archived_until: float  # the archive holds every event ingested before this (epoch s)


@dataclass(frozen=True)
class BackfillView:
    backfill: Backfill
    progress: BackfillProgress
    eta_seconds: float | None  # at the backfill's rate, while it runs and its total is known
    replay: Replay | None  # what the output's sink does with records written again


def iso(epoch_seconds: float) -> str:
    return datetime.fromtimestamp(epoch_seconds, UTC).isoformat().replace("+00:00", "Z")


def progress_of(
    settings: Settings, stream: str, backfill: Backfill, replay: Replay | None = None
) -> BackfillView:
    progress = BackfillProgress.load(BackfillProgress.path(settings.state_dir, stream, backfill.id))
    eta = None
    if backfill.active and progress.total is not None:
        eta = max(0, progress.total - progress.read) / backfill.rate
    return BackfillView(backfill, progress, eta, replay)


class Backfills:
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

    def plan(
        self,
        caller: Caller,
        stream: str,
        output: str,
        start: datetime,
        end: datetime,
        rate: int | None,
    ) -> BackfillPlan:
        spec, out = self._output(caller, stream, output)
        if not spec.archive.enabled:
            raise Conflict(
                f"stream {stream!r} keeps no archive to backfill from: turn it on with "
                "archive.enabled: true in its spec (it then keeps what arrives from then on, and "
                "what the fronting topic still holds)"
            )
        current = self.store.backfills(stream).get(output)
        if current is not None and current.active:
            raise Conflict(
                f"output {stream}.{output} is being backfilled ({current.id}): one backfill per "
                "output at a time; cancel it first",
                backfill=current.id,
            )
        check_not_replaying(stream, output, self.store.rewinds(stream).get(output))
        check_replay_rate(self.settings, rate)
        begins, ends = _utc(start).timestamp(), _utc(end).timestamp()
        now = self.clock()
        if begins >= ends:
            raise Unprocessable(f"the range is empty: {iso(begins)} is not before {iso(ends)}")
        if ends > now:
            raise Unprocessable(f"{iso(ends)} is in the future (it is {iso(now)})")
        kept_from = now - spec.archive.keep_days * 86400
        held_from = ArchiveSpan.load(ArchiveSpan.of(self.settings.state_dir, stream)).first
        if held_from is not None and held_from > kept_from and begins < held_from:
            raise Unprocessable(
                f"{iso(begins)} is before what the archive holds: its first event was ingested "
                f"at {iso(held_from)} (the archive began where the topic did when it was turned "
                "on; a Hive output's rows before that would be replaced by nothing)",
                earliest=iso(held_from),
            )
        if begins < kept_from:
            raise Unprocessable(
                f"{iso(begins)} is before what the archive keeps ({spec.archive.keep_days} days "
                f"of ingest time): the earliest is {iso(kept_from)}",
                earliest=iso(kept_from),
            )
        # In milliseconds, as Kafka's timestamps and the backfill's bounds are: an end with
        # microseconds the archive holds is not "after" what it holds.
        until = self.archived_until(spec, int(ends * 1000))
        if until < int(ends * 1000) / 1000:
            raise Unprocessable(
                f"the archive holds every event ingested up to {iso(until)} so far, not yet to "
                f"{iso(ends)}: end the range by then, or wait for its next write (every "
                f"{spec.archive.trigger})",
                archived_until=iso(until),
            )
        backfill = Backfill(
            id=f"bf-{secrets.token_hex(6)}",
            output=output,
            start=int(begins * 1000),
            end=int(ends * 1000),
            rate=rate or spec.recovery.max_events_per_second,
            requested_at=now,
            by=caller.name,
        )
        replay = SINKS[out.sink.type].replay
        return BackfillPlan(backfill, replay, _effect(spec, out, backfill, replay), until)

    def archived_until(self, spec: StreamSpec, end_ms: int) -> float:
        """`end_ms` (as epoch s) if the archive holds every event ingested before it, else the
        time of the first event it has yet to write (0 if it has written nothing)."""
        topic = fronting_topic(spec.name)
        archive = self.settings.checkpoints_dir / spec.name / ARCHIVE_QUERY
        written = latest(archive, topic)
        if written is None:
            return 0.0
        needed = self.positions.at_time(topic, end_ms)
        if all(written.offsets.get(p, 0) >= o for p, o in needed.items()):
            return end_ms / 1000
        first = self.positions.first_timestamp(topic, written.offsets)
        return min(first if first is not None else 0.0, end_ms / 1000)

    def start(
        self,
        caller: Caller,
        stream: str,
        output: str,
        start: datetime,
        end: datetime,
        rate: int | None,
    ) -> BackfillPlan:
        plan = self.plan(caller, stream, output, start, end, rate)
        backfill = plan.backfill
        spec, out = self._output(caller, stream, output)
        entry = audit(
            caller.name,
            "output.backfill",
            stream,
            owner=spec.owner,
            output=output,
            backfill=backfill.id,
            **{"from": iso(backfill.start / 1000), "to": iso(backfill.end / 1000)},
            rate=backfill.rate,
        )
        self.store.start_backfill(stream, backfill, out, entry)
        return plan

    def cancel(self, caller: Caller, stream: str, output: str) -> Backfill:
        spec, _ = self._output(caller, stream, output)
        current = self.store.backfills(stream).get(output)
        if current is None:
            raise NotFound(f"output {stream}.{output} has not been backfilled")
        if not current.active:
            raise Conflict(f"backfill {current.id} is {current.phase.value}: nothing to cancel")
        cancelling = current.model_copy(update={"phase": JobPhase.CANCELLING})
        entry = audit(
            caller.name,
            "output.backfill.cancel",
            stream,
            owner=spec.owner,
            output=output,
            backfill=current.id,
        )
        if not self.store.update_backfill(stream, cancelling, lambda b: b.active, entry):
            raise Conflict(f"backfill {current.id} changed meanwhile: ask again")
        return cancelling

    def progress(self, caller: Caller, stream: str, output: str) -> BackfillView:
        """The output's latest backfill and how far it has come (404 if it has none)."""
        _, out = self._output(caller, stream, output)
        current = self.store.backfills(stream).get(output)
        if current is None:
            raise NotFound(f"output {stream}.{output} has not been backfilled")
        return progress_of(self.settings, stream, current, SINKS[out.sink.type].replay)

    def _output(self, caller: Caller, stream: str, output: str) -> tuple[StreamSpec, OutputSpec]:
        spec = self.streams.get(caller, stream)
        found = spec.output(output)
        if found is None:
            raise NotFound(f"stream {stream!r} has no output {output!r}")
        return spec, found


def _utc(when: datetime) -> datetime:
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _effect(spec: StreamSpec, output: OutputSpec, backfill: Backfill, replay: Replay) -> str:
    source = (
        f"the archive's events ingested from {iso(backfill.start / 1000)} to "
        f"{iso(backfill.end / 1000)} ({HIVE_DATABASE}.{archive_table(spec.name)}) are routed "
        f"through the output as it is now, at most {backfill.rate:,} a second"
    )
    if replay is Replay.IDEMPOTENT:
        return (
            f"{source}; Elasticsearch documents are written again under their guids, replacing "
            "the earlier ones in place, and the range's documents of events the output now "
            "leaves out are deleted"
        )
    if replay is Replay.RESETTABLE:
        return (
            f"{source}; the Hive table's rows of the range are replaced hour by hour by what the "
            "output gives now, each hour at once when its events are all written"
        )
    return (
        f"{source}; each record is written again beside any first copy, with the header "
        f"ks_replay={backfill.id} (records the output would now leave out stay in the topic)"
    )


class BackfillRuns:
    """The fleet's side: each active backfill's application kept running until it is done,
    cancelled or has failed (`control.jobs`)."""

    def __init__(self, settings: Settings, store: Store, clock: Callable[[], float]) -> None:
        self.settings = settings
        self.store = store
        self.runs = JobRuns(settings, "backfills", clock)

    def step(self, spec: StreamSpec) -> None:
        for output, backfill in self.store.backfills(spec.name).items():
            if not backfill.active:
                continue
            progress = progress_of(self.settings, spec.name, backfill).progress
            job = Job(
                name=f"{spec.name}.{output}",
                record=backfill,
                argv=[
                    *("-m", "keystone.router.backfill", "--stream", spec.name),
                    *("--output", output, "--id", backfill.id),
                ],
                finished=progress.done,
                wanted=spec.output(output) is not None,
                update=lambda b, s=spec.name: self.store.update_backfill(s, b, lambda c: c.active),
            )
            try:
                self.runs.step(job)
            except KeystoneError as e:  # Redis away: next pass
                log.warning("backfill %s: %s", backfill.id, e)

    def forget(self, stream: str, output: str | None = None) -> None:
        """Stops the stream's (or output's) backfill applications."""
        self.runs.forget(f"{stream}.{output}" if output is not None else f"{stream}.*")
