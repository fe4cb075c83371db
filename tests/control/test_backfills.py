"""Backfills planned on their own: which ranges are taken, what each sink is told, and what is
refused, with the registry, the streams and Kafka's positions given as plain values (the real
ones: tests/router/test_recovery.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from keystone.contracts.checkpoints import Offsets
from keystone.contracts.errors import Conflict, LimitExceeded, NotFound, Unprocessable
from keystone.contracts.names import ARCHIVE_QUERY
from keystone.contracts.recovery import (
    ArchiveSpan,
    Backfill,
    BackfillProgress,
    HourDone,
    JobPhase,
    Operation,
    Rewind,
)
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec, load_spec
from keystone.control.backfills import Backfills
from keystone.control.operations import view_of
from keystone.control.tenancy import Caller
from tests.contracts.test_recovery import rewind
from tests.control.test_recovery_views import commit

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
HOUR = 3600
SPEC = load_spec(
    {
        "name": "plays",
        "owner": "team-a",
        "partitions": 2,
        "archive": {"keep_days": 2},
        "outputs": [
            {"name": "clicks", "sink": {"type": "kafka"}},
            {"name": "warehouse", "sink": {"type": "hive"}},
            {"name": "search", "sink": {"type": "elasticsearch"}},
        ],
    }
)
TEAM = Caller(name="team-a", admin=False)


def at(seconds_ago: float) -> datetime:
    return datetime.fromtimestamp(NOW - seconds_ago, UTC)


@dataclass
class FakeStore:
    latest: dict[str, Backfill] = field(default_factory=dict)
    rewound: dict[str, Rewind] = field(default_factory=dict)

    def backfills(self, stream: str) -> dict[str, Backfill]:
        return self.latest

    def rewinds(self, stream: str) -> dict[str, Rewind]:
        return self.rewound

    def operations(self, kind: type[Operation], stream: str) -> dict[str, Operation]:
        return {Backfill: self.latest, Rewind: self.rewound}[kind]  # type: ignore[return-value]


@dataclass
class FakeStreams:
    spec: StreamSpec = SPEC

    def get(self, caller: Caller, name: str) -> StreamSpec:
        if caller.name != self.spec.owner:
            raise NotFound(f"no stream {name!r}")
        return self.spec


@dataclass
class FakePositions:
    """One record a second per partition, from `first_at` (offset 0) on."""

    first_at: float = NOW - 3 * 86400

    def at_time(self, topic: str, epoch_ms: int) -> Offsets:
        offset = max(0, int(epoch_ms / 1000 - self.first_at))
        return {0: offset, 1: offset}

    def first_timestamp(self, topic: str, offsets: Offsets) -> float | None:
        return self.first_at + min(offsets.values()) if offsets else None


def backfills(
    tmp_path: Path,
    store: FakeStore | None = None,
    spec: StreamSpec = SPEC,
    archived_to: float | None = NOW - 60,
) -> Backfills:
    """The archive has written every record up to `archived_to` (None: never written)."""
    settings = Settings(state_dir=tmp_path)
    positions = FakePositions()
    archive = settings.checkpoints_dir / spec.name / ARCHIVE_QUERY
    if archived_to is not None and not archive.exists():
        offsets = positions.at_time("", int(archived_to * 1000))
        commit(settings, spec.name, ARCHIVE_QUERY, 0, offsets)
    return Backfills(
        settings,
        store or FakeStore(),  # type: ignore[arg-type]
        FakeStreams(spec),  # type: ignore[arg-type]
        positions,  # type: ignore[arg-type]
        clock=lambda: NOW,
    )


def test_a_range_the_archive_holds_is_planned_at_the_streams_rate(tmp_path: Path) -> None:
    plan = backfills(tmp_path).plan(TEAM, "plays", "warehouse", at(3 * HOUR), at(HOUR), None)
    backfill = plan.backfill
    assert backfill.start == int((NOW - 3 * HOUR) * 1000)
    assert backfill.end == int((NOW - HOUR) * 1000)
    assert backfill.rate == SPEC.recovery.max_events_per_second
    assert backfill.phase is JobPhase.RUNNING and backfill.by == "team-a"
    assert backfill.id.startswith("bf-")
    assert plan.archived_until == NOW - HOUR
    assert "replaced hour by hour" in plan.effect


def test_each_sink_is_told_what_becomes_of_it(tmp_path: Path) -> None:
    planner = backfills(tmp_path)
    effects = {
        o: planner.plan(TEAM, "plays", o, at(2 * HOUR), at(HOUR), 100)
        for o in ("clicks", "warehouse", "search")
    }
    assert effects["clicks"].replay == "append-only"
    assert f"ks_replay={effects['clicks'].backfill.id}" in effects["clicks"].effect
    assert effects["search"].replay == "idempotent"
    assert "deleted" in effects["search"].effect  # what the output leaves out now goes
    assert effects["warehouse"].replay == "resettable"
    assert all(p.backfill.rate == 100 for p in effects.values())


@pytest.mark.parametrize(
    ("start", "end", "says"),
    [
        (at(HOUR), at(2 * HOUR), "the range is empty"),
        (at(HOUR), at(HOUR), "the range is empty"),
        (at(HOUR), at(-60), "in the future"),
        (at(3 * 86400), at(HOUR), "before what the archive keeps (2 days"),
    ],
)
def test_a_range_outside_the_archive_is_refused_naming_what_exists(
    tmp_path: Path, start: datetime, end: datetime, says: str
) -> None:
    with pytest.raises(Unprocessable) as refused:
        backfills(tmp_path).plan(TEAM, "plays", "clicks", start, end, None)
    assert says in refused.value.message


def test_a_range_before_the_archives_first_event_is_refused_naming_it(tmp_path: Path) -> None:
    """An archive turned on five hours ago holds nothing before its first event: that is named,
    not the retention's start, which lies before it."""
    planner = backfills(tmp_path)
    span = ArchiveSpan.of(planner.settings.state_dir, "plays")
    ArchiveSpan(first=NOW - 5 * HOUR + 62.5).save(span)
    with pytest.raises(Unprocessable) as refused:
        planner.plan(TEAM, "plays", "warehouse", at(5 * HOUR), at(HOUR), None)
    assert "its first event was ingested at 2027-01-15T03:01:02.500000Z" in refused.value.message
    assert refused.value.details["earliest"] == "2027-01-15T03:01:02.500000Z"
    assert planner.plan(TEAM, "plays", "warehouse", at(5 * HOUR - 62.5), at(HOUR), None)
    # One older than the retention's start (its expiry is due): the retention speaks.
    ArchiveSpan(first=NOW - 4 * 86400).save(span)
    with pytest.raises(Unprocessable) as refused:
        planner.plan(TEAM, "plays", "warehouse", at(3 * 86400), at(HOUR), None)
    assert "before what the archive keeps (2 days" in refused.value.message


def test_a_range_past_what_the_archive_has_written_is_refused(tmp_path: Path) -> None:
    planner = backfills(tmp_path, archived_to=NOW - 2 * HOUR)
    with pytest.raises(Unprocessable) as refused:
        planner.plan(TEAM, "plays", "clicks", at(3 * HOUR), at(HOUR), None)
    assert "not yet to" in refused.value.message
    assert refused.value.details["archived_until"] == "2027-01-15T06:00:00Z"
    # Up to what it has written, it is taken, to the millisecond (an end with microseconds
    # was once refused for ever: the archive's mark is in milliseconds).
    planner.plan(TEAM, "plays", "clicks", at(3 * HOUR), at(2 * HOUR), None)
    finer = at(2 * HOUR) - timedelta(microseconds=244)
    assert planner.plan(TEAM, "plays", "clicks", at(3 * HOUR), finer, None).backfill.end == int(
        finer.timestamp() * 1000
    )
    never = backfills(tmp_path / "never", archived_to=None)
    with pytest.raises(Unprocessable):
        never.plan(TEAM, "plays", "clicks", at(3 * HOUR), at(2 * HOUR), None)


def test_a_stream_without_an_archive_says_how_to_keep_one(tmp_path: Path) -> None:
    plain = load_spec({**SPEC.model_dump(by_alias=True), "archive": {"enabled": False}})
    with pytest.raises(Conflict) as refused:
        backfills(tmp_path, spec=plain).plan(TEAM, "plays", "clicks", at(2 * HOUR), at(HOUR), None)
    assert "archive.enabled: true" in refused.value.message


def test_one_backfill_per_output_at_a_time(tmp_path: Path) -> None:
    planner = backfills(tmp_path)
    first = planner.plan(TEAM, "plays", "clicks", at(2 * HOUR), at(HOUR), None).backfill
    store = FakeStore({"clicks": first})
    with pytest.raises(Conflict) as refused:
        backfills(tmp_path, store).plan(TEAM, "plays", "clicks", at(2 * HOUR), at(HOUR), None)
    assert refused.value.details["backfill"] == first.id
    # Another output, or once it has ended, is fine.
    backfills(tmp_path, store).plan(TEAM, "plays", "search", at(2 * HOUR), at(HOUR), None)
    store.latest["clicks"] = first.model_copy(update={"phase": JobPhase.DONE})
    backfills(tmp_path, store).plan(TEAM, "plays", "clicks", at(2 * HOUR), at(HOUR), None)


def test_an_output_replaying_a_rewind_is_not_backfilled_meanwhile(tmp_path: Path) -> None:
    replaying = rewind(output="clicks")
    store = FakeStore(rewound={"clicks": replaying})
    with pytest.raises(Conflict, match=replaying.id):
        backfills(tmp_path, store).plan(TEAM, "plays", "clicks", at(2 * HOUR), at(HOUR), None)
    store.rewound["clicks"] = replaying.model_copy(update={"phase": "caught_up"})
    backfills(tmp_path, store).plan(TEAM, "plays", "clicks", at(2 * HOUR), at(HOUR), None)


def test_another_owners_stream_an_unknown_output_and_a_rate_past_the_limit(
    tmp_path: Path,
) -> None:
    planner = backfills(tmp_path)
    stranger = Caller(name="team-b", admin=False)
    with pytest.raises(NotFound):
        planner.plan(stranger, "plays", "clicks", at(2 * HOUR), at(HOUR), None)
    with pytest.raises(NotFound):
        planner.plan(TEAM, "plays", "nowhere", at(2 * HOUR), at(HOUR), None)
    with pytest.raises(LimitExceeded):
        planner.plan(TEAM, "plays", "clicks", at(2 * HOUR), at(HOUR), 10**9)


def test_progress_counts_the_slices_written_and_the_time_left(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    backfill = backfills(tmp_path).plan(TEAM, "plays", "clicks", at(2 * HOUR), at(HOUR), 100)
    progress = BackfillProgress(
        total=3000,
        hours={
            "2027011506": HourDone(events=2000, slices=2, read=2000, delivered=900, done=True),
            "2027011507": HourDone(events=1000, slices=1, read=500, delivered=200),
        },
    )
    progress.save(BackfillProgress.path(tmp_path, "plays", backfill.backfill.id))
    view = view_of(settings, "plays", backfill.backfill)
    assert (view.progress.read, view.progress.delivered) == (2500, 1100)
    assert view.eta_seconds == 5.0  # 500 events left at 100 a second
    ended = backfill.backfill.model_copy(update={"phase": JobPhase.DONE})
    assert view_of(settings, "plays", ended).eta_seconds is None
    # A file that does not read is a backfill that starts afresh.
    BackfillProgress.path(tmp_path, "plays", "bf-000000000000").write_text("{")
    fresh = BackfillProgress.load(BackfillProgress.path(tmp_path, "plays", "bf-000000000000"))
    assert fresh == BackfillProgress()


def test_a_time_without_its_zone_is_read_as_utc(tmp_path: Path) -> None:
    naive = at(2 * HOUR).replace(tzinfo=None)
    plan = backfills(tmp_path).plan(TEAM, "plays", "clicks", naive, at(HOUR), None)
    assert plan.backfill.start == int((NOW - 2 * HOUR) * 1000)
    elsewhere = at(2 * HOUR).astimezone(timezone(timedelta(hours=5)))  # the same moment
    plan = backfills(tmp_path).plan(TEAM, "plays", "clicks", elsewhere, at(HOUR), None)
    assert plan.backfill.start == int((NOW - 2 * HOUR) * 1000)
