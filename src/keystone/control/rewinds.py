"""Rewinds as owners ask for them: an output taken back to a restore point, a time or offsets.

`plan` works out, without changing anything, where the replay starts and stops, how many events
it reads, and what each sink will do with them; `start` records it (one per output at a time,
in the audit log), after which the router restarts the output's query in a new checkpoint
generation and the fleet follows it to the end (`keystone.control.recovery`).

Where a replay starts: at the restore point, at the first offset at or after the time per
partition (Kafka's offsets-for-times), or at the offsets given. A Hive output starts at a
restore point (the newest at or before the asked position) whatever was asked, since its table
is reset by whole batches: the replay removes the batches committed after that point, hour by
hour as it reaches them, and writes their events again.

A stream read from several fronting clusters is rewound on each, to the moment asked: home's
position says when that is (the restore point's time, the time asked, or the first record's at
the offsets asked), and the output's query on every other cluster replays from its own newest
restore point at or before that moment (from the first offset at or after it, for a time asked,
or where it has none). A cluster that does not answer refuses the rewind (503): its events would
not be replayed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from keystone.contracts import fronting
from keystone.contracts.checkpoints import (
    START,
    Commit,
    Offsets,
    checkpoint_dir,
    generations,
    query_id,
)
from keystone.contracts.errors import Gone, KeystoneError, NotFound, Unavailable, Unprocessable
from keystone.contracts.fronting import FrontingCluster, query_key, query_keys
from keystone.contracts.limits import check_replay_rate
from keystone.contracts.names import fronting_topic
from keystone.contracts.recovery import Redrive, Replaced, RestorePoint, Rewind, Span
from keystone.contracts.settings import Settings
from keystone.contracts.sinks import SINK_TYPES, Replay
from keystone.contracts.spec import OutputSpec, StreamSpec
from keystone.control.operations import Operations, iso
from keystone.control.positions import Extent, Positions
from keystone.control.recovery import committed, generation_of
from keystone.control.store import Planned
from keystone.control.tenancy import Caller


@dataclass(frozen=True)
class Target:
    """What an owner asks to rewind to: exactly one of the three."""

    restore_point: str | None = None
    to: datetime | None = None
    offsets: Offsets | None = None


@dataclass(frozen=True)
class Plan:
    rewind: Rewind
    position: Commit | None  # where the output was when it was asked
    replay: Replay  # what the sink does with records written again
    effect: str  # that, in words, for this output
    period_records: int | None  # append-only sinks: records written since the start's time
    dropped: list[RestorePoint]  # restore points after the start, forgotten by the rewind
    point: RestorePoint | None  # the restore point it starts at, if it does
    planned: Planned  # what it was planned on: the output, its rewind before


@dataclass(frozen=True)
class Progress:
    rewind: Rewind
    replayed: int
    position: Commit | None  # where the output is
    replay: Replay


class Rewinds(Operations[Rewind]):
    kind = Rewind

    def restore_points(self, caller: Caller, stream: str, output: str) -> list[RestorePoint]:
        """Home's restore points: those of other clusters are how a rewind aligns them."""
        self.output_of(caller, stream, output)
        return [p for p in self.store.restore_points(stream, output) if not p.cluster]

    def progress(self, caller: Caller, stream: str, output: str) -> Progress:
        """The output's latest rewind and how far its replay has come (404 if it has none)."""
        spec, _ = self.output_of(caller, stream, output)
        rewind = self.latest(stream, output)
        if rewind is None:
            raise NotFound(f"output {stream}.{output} {Rewind.never}")
        return progress(self.settings, spec, rewind)

    def start(self, caller: Caller, plan: Plan) -> Plan:
        """Starts the rewind planned (unless what it was planned on changed meanwhile)."""
        rewind = plan.rewind
        position = plan.position.offsets if plan.position is not None else None
        self.record(
            caller,
            rewind,
            plan.planned,
            lambda p: keeps(rewind, plan.point, p),
            asked=rewind.target,
            restore_point=rewind.restore_point,
            **{"from": position, "to": rewind.start},
            until=rewind.until,
            events=rewind.total,
            rate=rewind.rate,
        )
        return plan

    def plan(
        self, caller: Caller, stream: str, output: str, target: Target, rate: int | None
    ) -> Plan:
        spec, out = self.output_of(caller, stream, output)
        current = self.latest(stream, output)
        self.check_free(stream, output)
        if SINK_TYPES[out.sink.type].replay is Replay.RESETTABLE:
            # A Hive table's redriven events and a replay's could both be written meanwhile.
            redrive = self.store.operations(Redrive, stream).get(stream)
            refused = redrive.refusal(Rewind, stream, None) if redrive is not None else None
            if refused is not None:
                raise refused
        check_replay_rate(self.settings, rate)
        topic = fronting_topic(stream)
        extent = self.positions.extent(topic)
        every = self.store.restore_points(stream, output)  # newest first, every cluster's
        points = [p for p in every if not p.cluster]
        position = committed(self.settings, stream, output, current)
        point, start, asked = self._start(topic, target, points, extent.end)
        # A partition not given stays where the output is (else at the topic's start); and no
        # partition starts past what the output has delivered: events between would be skipped.
        delivered = position.offsets if position is not None else {}
        for p, earliest in extent.earliest.items():
            start.setdefault(p, delivered.get(p, earliest))
        start = {p: min(o, delivered.get(p, o)) for p, o in start.items()}
        self._within_retention(self.positions, topic, target, start, extent, asked)
        replay = out.sink.kind.replay
        replaced: list[Replaced] = []
        if replay is Replay.RESETTABLE:
            point, replaced = self._reset_from(spec.name, out, point, start, points, current)
            start = {**start, **point.offsets}
            self._within_retention(
                self.positions, topic, target, start, extent, f"restore point {point.id}"
            )
        until = {p: max(end, start.get(p, 0)) for p, end in extent.end.items()}
        moment = self._moment(topic, target, point, start, points)
        spans: dict[str, Span] = {}
        for cluster in fronting.clusters(self.settings)[1:]:
            span, undone = self._span(spec.name, out, cluster, target, moment, every, current)
            spans[cluster.name] = span
            replaced += [r for r in undone if r not in replaced]
        # The next generation: past any on disk too (a record lost must not reuse a checkpoint).
        on_disk = max(
            (
                g
                for key in query_keys(self.settings, output)
                for g in generations(self.settings, stream, key)
            ),
            default=0,
        )
        rewind = Rewind(
            id=Rewind.new_id(),
            output=output,
            generation=max(on_disk, generation_of(current)) + 1,
            start=start,
            until=until,
            rate=rate or spec.recovery.max_events_per_second,
            replaced=replaced,
            requested_at=self.clock(),
            by=caller.name,
            target=asked,
            restore_point=point.id if point is not None else None,
            total=_records(start, until) + sum(_records(s.start, s.until) for s in spans.values()),
            clusters=spans,
        )
        since = point.time if point is not None else None
        if target.to is not None and point is None:
            since = target.to.timestamp()
        period, effect = self._effect(spec, out, rewind, replay, since)
        dropped = [p for p in every if not keeps(rewind, point, p)]
        return Plan(
            rewind=rewind,
            position=position,
            replay=replay,
            effect=effect,
            period_records=period,
            dropped=dropped,
            point=point,
            planned=Planned(stream, out, current.id if current is not None else None),
        )

    def _moment(
        self,
        topic: str,
        target: Target,
        point: RestorePoint | None,
        start: Offsets,
        points: list[RestorePoint],
    ) -> float | None:
        """When the rewind goes back to (epoch s), as home's start says: the restore point's
        time, the time asked, or for offsets the first record's there, else (home holds none
        past them: it was idle, a standby took the writes) when the output first got to them
        (`points`: home's, newest first). None: it never has; nothing is replayed elsewhere."""
        if point is not None:
            return point.time
        if target.to is not None:
            return (target.to if target.to.tzinfo else target.to.replace(tzinfo=UTC)).timestamp()
        first = self.positions.first_timestamp(topic, start)
        if first is not None:
            return first
        reached = [p for p in points if all(p.offsets.get(q, 0) >= o for q, o in start.items())]
        return reached[-1].time if reached else None

    def _span(
        self,
        stream: str,
        output: OutputSpec,
        cluster: FrontingCluster,
        target: Target,
        moment: float | None,
        every: list[RestorePoint],
        current: Rewind | None,
    ) -> tuple[Span, list[Replaced]]:
        """The rewind on another fronting cluster than home: from the output's query's newest
        restore point there at or before `moment` (or its first, made after it), or, for a time
        asked or where it has none, from the first offset at or after `moment`; a resettable
        output's batches there that it undoes."""
        topic = fronting_topic(stream)
        try:
            positions = self.positions.on(cluster)
            extent = positions.extent(topic)
        except KeystoneError as e:
            raise Unavailable(
                f"fronting cluster {cluster.name} did not answer, and a rewind replays every "
                f"fronting cluster's events: {e.message}",
                retry_after=30,
            ) from e
        position = committed(self.settings, stream, output.name, current, cluster)
        delivered = position.offsets if position is not None else {}
        resettable = output.sink.kind.replay is Replay.RESETTABLE
        mine = [p for p in every if p.cluster == cluster.name]  # newest first
        point = aligned(mine, moment) if moment is not None else None
        if moment is None:
            start: Offsets = {}
        elif point is not None and (resettable or target.restore_point is not None):
            if resettable and not point.query:
                raise Unprocessable(f"restore point {point.id} does not name its query")
            start = dict(point.offsets)
        elif resettable and mine:
            raise Unprocessable(
                f"no restore point of {stream}.{output.name} on fronting cluster {cluster.name} "
                f"at or before {iso(moment)}: a Hive output's replay starts at one there too",
                earliest=mine[-1].id,
            )
        elif resettable:  # its query has committed nothing there: all it holds
            start = dict(extent.earliest)
        else:
            start = positions.at_time(topic, int(moment * 1000))
        for p, earliest in extent.earliest.items():
            start.setdefault(p, delivered.get(p, earliest))
        start = {p: min(o, delivered.get(p, o)) for p, o in start.items()}
        asked = f"{iso(moment) if moment is not None else 'its position'} on {cluster.name}"
        # Only a start before what it holds is refused: a standby's records come in bursts
        # (failovers) far apart, so a time before its first record kept is no sign of any lost.
        self._within_retention(positions, topic, Target(), start, extent, asked)
        until = {p: max(end, start.get(p, 0)) for p, end in extent.end.items()}
        if not resettable:
            return Span(start=start, until=until), []
        # The batches its queries there wrote after the point: every one, without a point.
        view = current.at(cluster) if current is not None else None
        running = query_id(
            checkpoint_dir(
                self.settings, stream, query_key(output.name, cluster), generation_of(view)
            )
        )
        later = {
            p.query for p in mine if p.query and (point is None or p.generation > point.generation)
        }
        if running:
            later.add(running)
        where = cluster.name
        replaced = [Replaced(query=point.query, after=point.batch, cluster=where)] if point else []
        skip = {point.query} if point is not None else set()
        replaced += [Replaced(query=q, after=-1, cluster=where) for q in sorted(later - skip)]
        return Span(start=start, until=until), replaced

    def _within_retention(
        self,
        positions: Positions,
        topic: str,
        target: Target,
        start: Offsets,
        extent: Extent,
        asked: str,
    ) -> None:
        """Refuses a start before what the fronting topic still holds, naming the earliest."""
        before = {p: o for p, o in start.items() if o < extent.earliest.get(p, 0)}
        if target.to is not None and not before:
            # Offsets-for-times answers a partition's earliest record for a time before it:
            # a time before the records the topic has dropped is before its retention.
            edge = {p: o for p, o in start.items() if o == extent.earliest.get(p) and o > 0}
            first = positions.first_timestamp(topic, edge) if edge else None
            if first is not None and first > target.to.timestamp():
                before = edge
        if before:
            raise Unprocessable(
                f"{asked} is before what the fronting topic {topic} still holds (its "
                "retention): the earliest position is "
                + _describe(extent.earliest, positions.first_timestamp(topic, extent.earliest)),
                earliest=extent.earliest,
            )

    def _start(
        self, topic: str, target: Target, points: list[RestorePoint], end: Offsets
    ) -> tuple[RestorePoint | None, Offsets, str]:
        """The restore point (if one was asked for), the start offsets and what was asked."""
        if target.restore_point is not None:
            point = next((p for p in points if p.id == target.restore_point), None)
            if point is None:
                raise Gone(
                    f"restore point {target.restore_point} no longer exists (points are kept "
                    "for the stream's recovery.keep, one per five minutes past an hour)",
                    oldest=points[-1].id if points else None,
                )
            return point, dict(point.offsets), f"restore point {point.id}"
        if target.to is not None:
            when = target.to if target.to.tzinfo else target.to.replace(tzinfo=UTC)
            if when.timestamp() > self.clock():
                raise Unprocessable(f"{when.isoformat()} is in the future")
            if when.timestamp() < 0:  # Kafka reads a negative time as "the latest"
                raise Unprocessable(f"{when.isoformat()} is before 1970")
            asked = when.isoformat().replace("+00:00", "Z")
            return None, self.positions.at_time(topic, int(when.timestamp() * 1000)), asked
        assert target.offsets is not None, "a target is one of the three"
        unknown = sorted(set(target.offsets) - set(end))
        if unknown:
            raise Unprocessable(
                f"the fronting topic has no partition {unknown[0]}: it has {sorted(end)}"
            )
        past = {p: o for p, o in target.offsets.items() if o > end[p]}
        if past:
            raise Unprocessable(f"offsets past the topic's end: {past} (the end is {end})")
        return None, dict(target.offsets), "offsets " + _offsets_text(target.offsets)

    def _reset_from(
        self,
        stream: str,
        output: OutputSpec,
        point: RestorePoint | None,
        start: Offsets,
        points: list[RestorePoint],
        current: Rewind | None,
    ) -> tuple[RestorePoint, list[Replaced]]:
        """A resettable output's restore point at or before `start`, and the batches its replay
        replaces: that point's query's later batches, and every later generation's."""
        if point is None:
            point = next((p for p in points if p.before(start)), None)
            if point is None:
                raise Unprocessable(
                    f"no restore point of {stream}.{output.name} at or before that position: a "
                    "Hive output starts a replay at one",
                    earliest=points[-1].id if points else None,
                )
        if not point.query:
            raise Unprocessable(f"restore point {point.id} does not name its query")
        later = {p.query for p in points if p.generation > point.generation and p.query}
        generation = generation_of(current)
        if generation > point.generation:
            running = query_id(checkpoint_dir(self.settings, stream, output.name, generation))
            if running:
                later.add(running)
        replaced = [Replaced(query=point.query, after=point.batch)]
        replaced += [Replaced(query=q, after=-1) for q in sorted(later - {point.query})]
        # What the last rewind undid stays undone, whether or not its replay got to remove it.
        inherited = current.replaced if current is not None else []
        replaced += [r for r in inherited if r not in replaced]
        return point, replaced

    def _effect(
        self,
        spec: StreamSpec,
        output: OutputSpec,
        rewind: Rewind,
        replay: Replay,
        since: float | None,
    ) -> tuple[int | None, str]:
        events = f"{rewind.total:,} events of the fronting topic"
        if rewind.clusters:
            names = [fronting.home(self.settings).name, *rewind.clusters]
            events += f" on clusters {', '.join(names)}"
        if replay is Replay.IDEMPOTENT:
            return None, (
                f"{events} are routed again; Elasticsearch documents are written again under "
                "their guids, replacing the earlier ones in place: nothing is added twice"
            )
        if replay is Replay.RESETTABLE:
            return None, (
                f"{events} are routed again; the Hive table's rows of the batches after restore "
                f"point {rewind.restore_point} are removed hour by hour as the replay reaches "
                "each hour, and written again: an hour being replayed is partly filled"
            )
        topic = output.sink.record_topic(spec.name, output.name)
        assert topic is not None, "an append-only sink writes to a topic"
        try:
            if since is None:
                since = self.positions.first_timestamp(fronting_topic(spec.name), rewind.start)
            records = None
            if since is not None:
                end = self.positions.extent(topic).end
                at = self.positions.at_time(topic, int(since * 1000))
                records = sum(max(0, end[p] - at.get(p, end[p])) for p in end)
        except KeystoneError:
            records = None
        held = f"about {records:,} records" if records is not None else "the records"
        return records, (
            f"{events} are routed again; {held} topic {topic} took since then are written "
            f"again beside the first copies, each with the header ks_replay={rewind.id}"
        )


def keeps(rewind: Rewind, point: RestorePoint | None, candidate: RestorePoint) -> bool:
    """Whether a restore point outlives the rewind: it is at or before the rewind's start on its
    cluster (and, for a rewind to a restore point, no later than that point); the others
    describe a history the rewind undoes. A cluster's the rewind does not reach are kept."""
    view = rewind.on(candidate.cluster or None)
    if view is None:
        return True
    if not candidate.before(view.start):
        return False
    return point is None or candidate.time <= point.time


def aligned(points: list[RestorePoint], moment: float) -> RestorePoint | None:
    """Of one cluster's restore points (newest first), the newest at or before `moment`; else
    the oldest, if it is where a query started: none kept is older (the cluster's query first
    started after the moment, or a rewind to before it started it there), so everything it
    delivered since is later. Else none: the older ones are past `recovery.keep`."""
    found = next((p for p in points if p.time <= moment), None)
    if found is None and points and points[-1].batch == START:
        return points[-1]
    return found


def progress(settings: Settings, spec: StreamSpec, rewind: Rewind) -> Progress:
    """How far the output's replay has come (an output the rewind names that the spec no
    longer has is not asked for)."""
    output = spec.output(rewind.output)
    assert output is not None, "a rewind of an output the stream has"
    position = committed(settings, spec.name, rewind.output, rewind)
    replayed = rewind.total if not rewind.replaying else 0
    if rewind.replaying:
        for cluster in fronting.clusters(settings):
            view = rewind.at(cluster)
            there = committed(settings, spec.name, rewind.output, rewind, cluster)
            if view is not None and there is not None:
                replayed += view.replayed(there.offsets)
    return Progress(rewind, replayed, position, output.sink.kind.replay)


def _records(start: Offsets, until: Offsets) -> int:
    return sum(max(0, end - start.get(p, 0)) for p, end in until.items())


def _offsets_text(offsets: Offsets) -> str:
    return ", ".join(f"{p}:{o}" for p, o in sorted(offsets.items()))


def _describe(offsets: Offsets, stamp: float | None) -> str:
    when = datetime.fromtimestamp(stamp, UTC).isoformat() if stamp is not None else "unknown"
    return f"offsets {_offsets_text(offsets)} (from {when})"
