"""Backfills: an output's events of a time range routed again from the stream's archive.

`Backfills` is what owners ask (API, CLI, UI): `plan` checks a range and says what each sink
will do with it, `start` records the backfill (one per output at a time, in the audit log);
`cancel` and `view` are every job's (`control.operations`). The fleet runs its application
until it is done (`control.jobs`).

A range must lie within what the archive holds: after the retention's start and the archive's
first event (`ArchiveSpan`, which its router keeps), and before the archive's last write (an
event of the range the archive has yet to write would be missed; and a Hive output's hours are
replaced whole by what the archive has).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from keystone.contracts.checkpoints import latest
from keystone.contracts.errors import Conflict, Unprocessable
from keystone.contracts.limits import check_replay_rate
from keystone.contracts.names import ARCHIVE_QUERY, HIVE_DATABASE, archive_table, fronting_topic
from keystone.contracts.recovery import ArchiveSpan, Backfill
from keystone.contracts.sinks import Replay
from keystone.contracts.spec import OutputSpec, StreamSpec
from keystone.control.operations import Jobs, iso
from keystone.control.store import Planned
from keystone.control.tenancy import Caller


@dataclass(frozen=True)
class BackfillPlan:
    backfill: Backfill
    replay: Replay  # what the sink does with records written again
    effect: str  # that, in words, for this output
    archived_until: float  # the archive holds every event ingested before this (epoch s)
    planned: Planned  # what it was planned on


class Backfills(Jobs[Backfill]):
    kind = Backfill

    def plan(
        self,
        caller: Caller,
        stream: str,
        output: str,
        start: datetime,
        end: datetime,
        rate: int | None,
    ) -> BackfillPlan:
        spec, out = self.output_of(caller, stream, output)
        if not spec.archive.enabled:
            raise Conflict(
                f"stream {stream!r} keeps no archive to backfill from: turn it on with "
                "archive.enabled: true in its spec (it then keeps what arrives from then on, and "
                "what the fronting topic still holds)"
            )
        self.check_free(stream, output)
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
            id=Backfill.new_id(),
            output=output,
            start=int(begins * 1000),
            end=int(ends * 1000),
            rate=rate or spec.recovery.max_events_per_second,
            requested_at=now,
            by=caller.name,
        )
        replay = out.sink.kind.replay
        current = self.latest(stream, output)
        planned = Planned(stream, out, current.id if current is not None else None)
        return BackfillPlan(backfill, replay, _effect(spec, out, backfill, replay), until, planned)

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

    def start(self, caller: Caller, plan: BackfillPlan) -> BackfillPlan:
        """Starts the backfill planned (unless what it was planned on changed meanwhile)."""
        backfill = plan.backfill
        self.record(
            caller,
            backfill,
            plan.planned,
            **{"from": iso(backfill.start / 1000), "to": iso(backfill.end / 1000)},
            rate=backfill.rate,
        )
        return plan


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
