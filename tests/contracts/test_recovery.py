"""Restore points and rewinds as records: which old points are thinned away, where a replay
stands, and the Spark checkpoint logs they are read from (files written here in Spark's
format)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from keystone.contracts import fronting
from keystone.contracts.checkpoints import (
    START,
    checkpoint_dir,
    commits,
    generations,
    latest,
    query_id,
    remove_generations,
)
from keystone.contracts.errors import Conflict, InvalidSpec
from keystone.contracts.recovery import (
    DENSE_SECONDS,
    OPERATIONS,
    SPARSE_SECONDS,
    Backfill,
    BackfillProgress,
    HourDone,
    JobPhase,
    Redrive,
    Replaced,
    RestorePoint,
    Rewind,
    RewindPhase,
    Span,
    check_free,
    thin,
)
from keystone.contracts.registry import slot
from keystone.contracts.settings import Settings
from keystone.contracts.spec import load_spec

NOW = 1_800_000_000.0
TOPIC = "keystone.plays"


def point(age: float, batch: int = 0) -> RestorePoint:
    return RestorePoint(
        id=RestorePoint.make_id(0, batch),
        time=NOW - age,
        generation=0,
        batch=batch,
        query="q",
        offsets={0: batch},
    )


def rewind(**changes: object) -> Rewind:
    fields = {
        "id": "rw-0123456789ab",
        "output": "search",
        "generation": 1,
        "start": {0: 10, 1: 20},
        "until": {0: 110, 1: 70},
        "rate": 100,
        "requested_at": NOW,
        "by": "team-a",
        "target": "restore point 0-3",
        "total": 150,
    }
    return Rewind.model_validate(fields | changes)


def test_points_of_the_last_hour_are_all_kept() -> None:
    points = [point(age, batch) for batch, age in enumerate(range(0, int(DENSE_SECONDS), 10))]
    assert thin(points, NOW, keep_seconds=86400) == []


def test_older_points_keep_the_newest_of_each_five_minutes_and_none_past_retention() -> None:
    ages = [DENSE_SECONDS + 10 * i for i in range(120)] + [86400 + 1, 86400 + 600]
    points = [point(age, batch) for batch, age in enumerate(ages)]
    dropped = thin(points, NOW, keep_seconds=86400)
    kept = [p for p in points if p not in dropped]
    assert all(NOW - p.time <= 86400 for p in kept)  # retention
    buckets = [int(p.time // SPARSE_SECONDS) for p in kept if NOW - p.time > DENSE_SECONDS]
    assert len(buckets) == len(set(buckets))  # one per five minutes
    for p in dropped:  # each thinned point has a newer one kept in its five minutes
        if NOW - p.time <= 86400:
            assert any(
                int(k.time // SPARSE_SECONDS) == int(p.time // SPARSE_SECONDS) and k.time > p.time
                for k in kept
            )
    assert thin(kept, NOW, keep_seconds=86400) == []  # thinning twice changes nothing


def test_a_point_is_before_offsets_only_in_every_partition() -> None:
    at = RestorePoint(id="0-1", time=NOW, generation=0, batch=1, offsets={0: 5, 1: 9})
    assert at.before({0: 5, 1: 9}) and at.before({0: 6, 1: 10})
    assert not at.before({0: 4, 1: 100})
    assert RestorePoint.make_id(2, START) == "2-start"
    assert RestorePoint.make_id(2, 7, "west") == "2-7@west"


def test_a_replay_counts_only_what_lies_between_its_start_and_until() -> None:
    replay = rewind()
    assert replay.replayed({0: 10, 1: 20}) == 0
    assert replay.replayed({0: 60, 1: 30}) == 60
    assert replay.replayed({0: 500, 1: 500}) == 150  # live records past `until` are not replays
    assert not replay.caught_up({0: 110, 1: 69})
    assert replay.caught_up({0: 110, 1: 70})
    assert replay.replaying and not rewind(phase=RewindPhase.CAUGHT_UP).replaying


def test_a_rewind_runs_on_each_cluster_it_reaches_with_that_topics_span() -> None:
    replay = rewind(
        clusters={"west": Span(start={0: 0, 1: 0}, until={0: 30, 1: 0})},
        replaced=[Replaced(query="q0", after=3), Replaced(query="w0", after=-1, cluster="west")],
    )
    west, home = replay.on("west"), replay.on(None)
    assert west is not None and (west.start, west.until) == ({0: 0, 1: 0}, {0: 30, 1: 0})
    assert west.id == replay.id and west.generation == replay.generation
    assert west.replaced == [Replaced(query="w0", after=-1, cluster="west")]  # its own batches
    assert home is not None and (home.start, home.until) == (replay.start, replay.until)
    assert home.replaced == [Replaced(query="q0", after=3)]
    assert replay.on("south") is None  # a cluster named since: not rewound
    east, west_cluster, south = fronting.clusters(Settings(fronting_clusters="east,west,south"))
    assert replay.at(east) == home and replay.at(west_cluster) == west
    assert replay.at(south) is None
    assert west.replayed({0: 12}) == 12 and not west.caught_up({0: 29})
    assert not west.empty
    assert rewind(clusters={"west": Span(start={0: 4}, until={0: 4})}).on("west").empty  # type: ignore[union-attr]
    # Each cluster runs as usual again once its own replay has caught up.
    home_done = replay.model_copy(update={"caught_up_on": [""]})
    assert not home_done.on(None).replaying and home_done.on("west").replaying  # type: ignore[union-attr]
    assert home_done.replaying  # the rewind itself, until every cluster has


def test_each_clusters_points_are_thinned_apart() -> None:
    old = DENSE_SECONDS + 10  # all but one of the same five minutes, past the hour

    def west(age: float, batch: int) -> RestorePoint:
        at = point(age, batch)
        return at.model_copy(update={"id": f"{at.id}@west", "cluster": "west"})

    east = [point(90_000, 0), point(old + 20, 1), point(old + 10, 2)]
    wests = [west(90_200, 0), west(90_100, 1), west(old + 15, 2), west(old + 12, 3), west(5, 4)]
    # Each cluster keeps its newest (east's, though west's is newer), and of each five
    # minutes its own newest; past retention, home keeps none, and a standby its newest: where
    # it has been since, idle between failovers.
    dropped = thin([*east, *wests], NOW, keep_seconds=86_400)
    assert sorted(p.id for p in dropped) == ["0-0", "0-0@west", "0-2@west"]


def test_a_rewind_record_is_checked_as_it_is_read_back() -> None:
    with pytest.raises(ValidationError):
        rewind(id="rw-../../etc")
    with pytest.raises(ValidationError):
        rewind(generation=0)  # generation 0 is the output's first checkpoint, never a rewind's
    again = Rewind.model_validate_json(rewind().model_dump_json())
    assert again == rewind() and again.start == {0: 10, 1: 20}  # partitions back as numbers


def test_the_recovery_section_takes_durations_and_its_limits_are_checked() -> None:
    base = {"name": "plays", "owner": "team-a"}
    assert load_spec(base).recovery.keep_seconds == 86400
    spec = load_spec(base | {"recovery": {"keep": "90 minutes", "max_events_per_second": 10}})
    assert spec.recovery.keep_seconds == 5400
    for bad in ("forever", "0 hours", "1 week", "-1 days"):
        with pytest.raises(InvalidSpec):
            load_spec(base | {"recovery": {"keep": bad}})


def write_log(path: Path, line: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("v1\n" + json.dumps(line) + "\n")


def spark_checkpoint(
    path: Path, batches: dict[int, dict[str, int]], committed: int, topic: str = TOPIC
) -> None:
    """A checkpoint as Spark leaves it: a query id, where it started, each batch's end offsets,
    and commits for the batches up to `committed` (a later batch is planned, not delivered)."""
    path.mkdir(parents=True)
    (path / "metadata").write_text(json.dumps({"id": "5a0c"}))
    write_log(path / "sources" / "0" / "0", {topic: {"0": 0, "1": 0}})
    for batch, offsets in batches.items():
        metadata = {"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}}
        (path / "offsets").mkdir(exist_ok=True)
        (path / "offsets" / str(batch)).write_text(
            "v1\n" + json.dumps(metadata) + "\n" + json.dumps({topic: offsets})
        )
        (path / "offsets" / f".{batch}.crc").write_text("x")
        if batch <= committed:
            write_log(path / "commits" / str(batch), {"nextBatchWatermarkMs": 0})


def test_commits_are_read_from_sparks_logs_with_where_the_query_started(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    path = checkpoint_dir(settings, "plays", "search")
    spark_checkpoint(path, {0: {"0": 5, "1": 7}, 1: {"0": 9, "1": 7}, 2: {"0": 12, "1": 8}}, 1)
    found = commits(path, TOPIC)
    assert [(c.batch, c.offsets) for c in found] == [
        (START, {0: 0, 1: 0}),
        (0, {0: 5, 1: 7}),
        (1, {0: 9, 1: 7}),
    ]  # batch 2 is not committed
    assert [c.batch for c in commits(path, TOPIC, after=0)] == [1]
    assert latest(path, TOPIC).batch == 1  # type: ignore[union-attr]
    assert query_id(path) == "5a0c"
    assert commits(path, "another.topic") == []
    assert latest(tmp_path / "none", TOPIC) is None


def test_generations_are_found_and_removed_by_number(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    for generation in (0, 1, 3):
        checkpoint_dir(settings, "plays", "search", generation).mkdir(parents=True)
    checkpoint_dir(settings, "plays", "search_two", 0).mkdir(parents=True)
    (settings.checkpoints_dir / "plays" / "search.x").mkdir()
    assert set(generations(settings, "plays", "search")) == {0, 1, 3}
    remove_generations(settings, "plays", "search", below=3)
    assert set(generations(settings, "plays", "search")) == {3}
    remove_generations(settings, "plays", "search")
    assert generations(settings, "plays", "search") == {}
    assert set(generations(settings, "plays", "search_two")) == {0}  # another output's


def test_thinning_keeps_a_point_of_every_generation() -> None:
    old = DENSE_SECONDS + SPARSE_SECONDS * 3
    brief = RestorePoint(id="1-0", time=NOW - old, generation=1, batch=0, query="q1", offsets={})
    later = RestorePoint(
        id="2-0", time=NOW - old + 1, generation=2, batch=0, query="q2", offsets={}
    )
    assert thin([brief, later], NOW, keep_seconds=86400) == []  # same five minutes, both kept


def test_the_newest_point_outlives_retention() -> None:
    idle = [point(90000, 1), point(90600, 0)]  # an output idle for a day and more
    assert thin(idle, NOW, keep_seconds=86400) == [idle[1]]


def backfill_of(output: str = "clicks", **fields: object) -> Backfill:
    values = {"id": Backfill.new_id(), "output": output, "start": 0, "end": 1, "rate": 10}
    return Backfill(**{**values, "requested_at": NOW, "by": "x", **fields})  # type: ignore[arg-type]


def test_each_kind_s_id_is_its_own_and_where_its_records_go() -> None:
    assert Rewind.new_id().startswith("rw-") and Redrive.new_id().startswith("rd-")
    with pytest.raises(ValidationError, match="a backfill id is 'bf-'"):
        backfill_of(id="rw-0123456789ab")
    assert slot(Rewind, "plays", "clicks") == ("keystone:rewinds:plays", "clicks")
    assert slot(Backfill, "plays", "clicks") == ("keystone:backfills:plays", "clicks")
    assert slot(Redrive, "plays", None) == ("keystone:redrives", "plays")  # the stream's
    assert set(OPERATIONS) == {"rewinds", "backfills", "redrives"}


def test_one_of_a_kind_at_a_time_and_a_rewind_and_a_backfill_exclude_each_other() -> None:
    running = backfill_of()
    replaying = rewind()
    check_free(Backfill, "plays", "clicks", [None, None])  # nothing under way
    with pytest.raises(Conflict) as same:
        check_free(Backfill, "plays", "clicks", [running])
    assert same.value.message == (
        f"output plays.clicks is being backfilled ({running.id}): one backfill per output at a "
        "time; cancel it first"
    )
    assert same.value.details == {"backfill": running.id}
    with pytest.raises(Conflict) as other:
        check_free(Backfill, "plays", "clicks", [None, replaying])
    assert other.value.message == (
        f"output plays.clicks is replaying rewind {replaying.id}: a backfill waits until it has "
        "caught up"
    )
    with pytest.raises(Conflict, match=r"one rewind per output at a time$"):
        check_free(Rewind, "plays", "clicks", [replaying])
    # Ended, neither holds anything back.
    done = running.model_copy(update={"phase": JobPhase.DONE})
    caught_up = replaying.model_copy(update={"phase": RewindPhase.CAUGHT_UP})
    check_free(Rewind, "plays", "clicks", [caught_up, done])


def test_a_job_s_time_left_is_at_its_rate_while_it_runs() -> None:
    job = backfill_of(rate=100)
    progress = BackfillProgress(total=1000, hours={"2027011506": HourDone(read=400)})
    assert progress.eta_seconds(job) == 6.0  # 600 events left at 100 a second
    assert BackfillProgress().eta_seconds(job) is None  # not counted yet
    assert progress.eta_seconds(job.model_copy(update={"phase": JobPhase.CANCELLED})) is None
