"""A backfill's two safeguards for a sink that replaces a range whole (Hive), on their own: it
waits until the live output and the archive have passed the range (`settled`, checkpoints as
Spark writes them, Kafka's positions given), and an hour's swap touches only the files with
rows in the window and is finished, not done twice, after a crash (`HiveTable.replace_hour`,
on a local Spark session and a Parquet folder; the real Hive: tests/router/test_recovery.py
and tests/router/test_backfill_behind_live.py). Then the same swaps keeping an event once when a
rewind's replay writes it again after a redrive or a backfill did, or a redrive after a replay
(`replace_copies`, `not_held`; with the real services: tests/loadtest/test_loadtest.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from keystone.contracts.names import ARCHIVE_QUERY
from keystone.contracts.settings import Settings
from keystone.router.jobs.backfill import settled
from keystone.router.sinks.hive import table as hive
from keystone.router.sinks.hive.table import HiveTable, hour_columns
from tests.control.test_recovery_views import commit

HOUR_MS = 3_600_000
HOUR = (20261126, 10)
BEGINS = 1_795_687_200_000  # 2026-11-26T10:00:00Z
END = BEGINS + 1_800_000  # a window of the hour's first half


def settings(tmp_path: Path) -> Settings:
    return Settings(state_dir=tmp_path, kafka_ack_timeout_seconds=10)


def test_a_range_is_settled_once_kafka_has_it_and_the_live_output_and_archive_passed_it(
    tmp_path: Path,
) -> None:
    config = settings(tmp_path)
    needed = {0: 50, 1: 70}
    asked: list[int] = []

    def at(cluster: str, ms: int) -> dict[int, int]:
        assert cluster == "main"
        asked.append(ms)
        return needed

    def waits(now_ms: int) -> str:
        return settled(config, "plays", "warehouse", END, now_ms / 1000, at)

    # Until twice the proxy's ack timeout (queue, then Kafka) and 5 s of clock slack have
    # passed, an event stamped before the end may yet land.
    assert "to reach Kafka" in waits(END + 24_999) and asked == []
    assert "the live output" in waits(END + 25_000)  # no checkpoint yet
    assert asked == [END + 25_000]  # the first record stamped after the end and that margin
    commit(config, "plays", "warehouse", 0, {0: 50, 1: 69})
    assert "the live output" in waits(END + 60_000)  # one partition short
    commit(config, "plays", "warehouse", 1, {0: 50, 1: 70})  # a rewind's generation: the live one
    assert "the archive" in waits(END + 60_000)
    commit(config, "plays", ARCHIVE_QUERY, 0, {0: 80, 1: 90})
    assert waits(END + 60_000) == ""


def test_with_two_fronting_clusters_a_range_waits_for_the_queries_on_each(tmp_path: Path) -> None:
    """What west took must be in the archive, and past its live query, before the swap."""
    config = Settings(
        state_dir=tmp_path, kafka_ack_timeout_seconds=10, fronting_clusters="east,west"
    )
    needed = {"east": {0: 5}, "west": {0: 9}}

    def waits() -> str:
        return settled(
            config, "plays", "warehouse", END, (END + 60_000) / 1000, lambda c, _: needed[c]
        )

    commit(config, "plays", "warehouse", 0, {0: 5})
    commit(config, "plays", ARCHIVE_QUERY, 0, {0: 5})
    assert "the live output on west" in waits()
    commit(config, "plays", "warehouse@west", 0, {0: 9})
    assert "the archive on west" in waits()
    commit(config, "plays", f"{ARCHIVE_QUERY}@west", 0, {0: 9})
    assert waits() == ""


@pytest.fixture
def table(spark: SparkSession, tmp_path: Path) -> Iterator[HiveTable]:
    spark.sql("CREATE DATABASE IF NOT EXISTS keystone")
    name = f"swap_{tmp_path.name[-8:].replace('-', '_')}"
    spark.sql(
        f"CREATE TABLE keystone.{name} (guid STRING, `timestamp` BIGINT, record STRING, "
        f"dateint INT, hour INT) USING parquet PARTITIONED BY (dateint, hour) "
        f"LOCATION '{tmp_path / 'table'}'"
    )
    handle = HiveTable(name)
    handle.location = f"file:{tmp_path / 'table'}"
    yield handle
    spark.sql(f"DROP TABLE IF EXISTS keystone.{name}")


def rows(spark: SparkSession, guids: list[str], at: int) -> object:
    return spark.createDataFrame(
        [(g, at + n, f'{{"g":"{g}"}}') for n, g in enumerate(guids)],
        "guid STRING, timestamp BIGINT, record STRING",
    ).select("*", *hour_columns())


def publish(spark: SparkSession, table: HiveTable, tag: str, frame) -> None:
    table.publish(spark, table.stage(frame, tag), tag)


def holds(spark: SparkSession, table: HiveTable) -> list[str]:
    folder = f"{table.location}/dateint={HOUR[0]}/hour={HOUR[1]}"
    return sorted(r.guid for r in spark.read.parquet(f"{folder}/*.parquet").collect())


def staging(spark: SparkSession, table: HiveTable) -> list[str]:
    """What is left in the table's staging folder."""
    fs, path = table.fs(spark)
    return sorted(s.getPath().getName() for s in fs.listStatus(path(f"{table.location}/_staging")))


def names(table: HiveTable, spark: SparkSession) -> dict[str, float]:
    return {s.getPath().getName(): s.getModificationTime() for s in table.files(spark)}


def test_a_swap_touches_only_the_files_with_rows_in_the_window_and_keeps_their_names(
    spark: SparkSession, table: HiveTable
) -> None:
    # A live batch across the window's end, and one after it (written while the backfill ran).
    across = "batch-q1-000000000007"
    after = "batch-q1-000000000008"
    publish(spark, table, across, rows(spark, ["a1", "a2"], END - 1).coalesce(1))
    publish(spark, table, after, rows(spark, ["b1"], END + 5_000).coalesce(1))
    untouched = {n: t for n, t in names(table, spark).items() if n.startswith(after)}
    staged = table.stage(rows(spark, ["a1", "r1"], BEGINS), "bf-x-0")

    table.replace_hour(spark, HOUR, (BEGINS, END), [staged], "bf-x-0")

    # a1 (in the window) now only as the backfill wrote it; a2 kept, under its batch's name.
    assert holds(spark, table) == ["a1", "a2", "b1", "r1"]
    now = names(table, spark)
    assert {n: t for n, t in now.items() if n.startswith(after)} == untouched
    kept = [n for n in now if n.startswith(across)]
    assert len(kept) == 1 and hive.PUBLISHED.fullmatch(kept[0])
    assert staging(spark, table) == ["bf-x-0.swap.applied", "bf-x-0.swap.json"]
    # Done again (the backfill's application died before it recorded the hour done): an
    # applied swap is not planned anew over what it left.
    table.replace_hour(spark, HOUR, (BEGINS, END), [staged], "bf-x-0")
    assert holds(spark, table) == ["a1", "a2", "b1", "r1"]
    table.settle_swaps(spark, keep=None)  # the backfill over: its journal goes
    assert staging(spark, table) == []
    # The batch published again (as Spark would rerun it) still replaces its own rows: a2 is
    # not doubled (a1 is, which is why a backfill swaps only behind committed batches).
    publish(spark, table, across, rows(spark, ["a1", "a2"], END - 1).coalesce(1))
    assert holds(spark, table) == ["a1", "a1", "a2", "b1", "r1"]


def test_a_swap_cut_short_after_its_moves_is_finished_from_its_journal(
    spark: SparkSession, table: HiveTable
) -> None:
    publish(spark, table, "batch-q1-000000000001", rows(spark, ["a1", "a2"], END - 1))
    staged = table.stage(rows(spark, ["a1", "r1"], BEGINS), "bf-y-0")
    # The plan written and its moves done; the deletions never happened (the process died).
    plan = table._plan_swap(spark, HOUR, (BEGINS, END), [staged], "bf-y-0")
    fs, path = table.fs(spark)
    journal = path(f"{table.location}/_staging/bf-y-0{hive.JOURNAL}")
    hive._write_text(spark, journal, json.dumps(plan))
    for source, target in plan["moves"]:
        fs.rename(path(source), path(target))
    assert holds(spark, table) == ["a1", "a1", "a2", "a2", "r1"]  # mid-swap

    table.replace_hour(spark, HOUR, (BEGINS, END), [staged], "bf-y-0")

    assert holds(spark, table) == ["a1", "a2", "r1"]
    table.settle_swaps(spark, keep=None)
    assert staging(spark, table) == []


def test_a_swap_an_application_left_halfway_is_finished_by_the_next_backfill(
    spark: SparkSession, table: HiveTable
) -> None:
    publish(spark, table, "batch-q1-000000000001", rows(spark, ["a1", "a2"], END - 1))
    old = table.stage(rows(spark, ["a1", "r1"], BEGINS), "bf-old-0")
    plan = table._plan_swap(spark, HOUR, (BEGINS, END), [old], "bf-old-0")
    _, path = table.fs(spark)
    hive._write_text(
        spark, path(f"{table.location}/_staging/bf-old-0{hive.JOURNAL}"), json.dumps(plan)
    )
    table.stage(rows(spark, ["x"], BEGINS), "bf-gone-0")  # a cancelled one's slice, left
    table.stage(rows(spark, ["y"], BEGINS), "bf-new-0")  # the running backfill's own

    table.settle_swaps(spark, keep="bf-new")

    assert holds(spark, table) == ["a1", "a2", "r1"]  # the old swap finished, once
    assert staging(spark, table) == ["bf-new-0"]


def test_a_whole_hour_is_replaced_whole(spark: SparkSession, table: HiveTable) -> None:
    publish(spark, table, "batch-q1-000000000001", rows(spark, ["a1", "a2"], BEGINS))
    staged = table.stage(rows(spark, ["r1"], BEGINS), "bf-z-0")
    table.replace_hour(spark, HOUR, (BEGINS, BEGINS + HOUR_MS), [staged], "bf-z-0")
    assert holds(spark, table) == ["r1"]


# A rewind of a Hive output past events a redrive or a backfill wrote (files of their own, not
# a batch's the rewind undoes): its replay's batch replaces those copies, and a redrive leaves
# out what a replay or a backfill wrote already. Either order, each event once.


def test_a_replayed_batch_replaces_the_copies_a_redrive_and_a_backfill_wrote(
    spark: SparkSession, table: HiveTable
) -> None:
    live = "batch-q1-000000000001"
    publish(spark, table, live, rows(spark, ["a1", "a2"], END - 1).coalesce(1))
    # A redrive's slice past the backfill's window (the window's rows are the archive's).
    publish(spark, table, "rd-0123456789ab-00000", rows(spark, ["d1", "d2"], END + 10))
    staged = table.stage(rows(spark, ["a1", "r1"], BEGINS), "bf-x-0")
    table.replace_hour(spark, HOUR, (BEGINS, END), [staged], "bf-x-0")
    table.settle_swaps(spark, keep=None)
    assert holds(spark, table) == ["a1", "a2", "d1", "d2", "r1"]
    batches = {n: t for n, t in names(table, spark).items() if n.startswith("batch-")}

    # The replay (a new generation's query) writes a1 (the backfill's copy), d1 (the
    # redrive's) and n1 (new): published, then their other copies removed.
    replay = "batch-q2-000000000000"
    frame = rows(spark, ["a1", "d1", "n1"], BEGINS + 20)
    publish(spark, table, replay, frame)
    table.replace_copies(spark, [HOUR], frame, replay)

    assert holds(spark, table) == ["a1", "a2", "d1", "d2", "n1", "r1"]
    now = names(table, spark)
    assert {n: t for n, t in now.items() if n.startswith(live)} == {  # a batch's: untouched
        n: t for n, t in batches.items() if n.startswith(live)
    }
    # What was left of each touched file keeps its name (a redrive's slice run again replaces
    # it), and no journal stays.
    assert any(n.startswith("rd-0123456789ab-00000-00000.") for n in now)
    assert staging(spark, table) == []
    # Run again (the batch Spark replays after a crash): nothing more goes.
    publish(spark, table, replay, frame)
    table.replace_copies(spark, [HOUR], frame, replay)
    assert holds(spark, table) == ["a1", "a2", "d1", "d2", "n1", "r1"]


def test_a_removal_cut_short_is_finished_when_the_batch_runs_again(
    spark: SparkSession, table: HiveTable
) -> None:
    publish(spark, table, "rd-0123456789ab-00000", rows(spark, ["d1", "d2"], BEGINS))
    replay = "batch-q2-000000000000"
    frame = rows(spark, ["d1"], BEGINS + 20)
    publish(spark, table, replay, frame)
    # Its plan journaled and its moves done; the deletions never happened (the router died).
    name = f"{replay}.copies-{HOUR[0]}-{HOUR[1]}"
    marked = frame.select("guid").withColumn("inside", F.lit(True))
    plan = table._plan(
        spark,
        HOUR,
        [],
        name,
        lambda found: found.join(marked, "guid", "left").fillna(False, ["inside"]),
        batches=False,
    )
    fs, path = table.fs(spark)
    hive._write_text(
        spark, path(f"{table.location}/_staging/{name}{hive.JOURNAL}"), json.dumps(plan)
    )
    for source, target in plan["moves"]:
        fs.rename(path(source), path(target))
    assert holds(spark, table) == ["d1", "d1", "d2", "d2"]  # mid-removal

    publish(spark, table, replay, frame)
    table.replace_copies(spark, [HOUR], frame, replay)

    assert holds(spark, table) == ["d1", "d2"]
    assert staging(spark, table) == []


def test_a_redrive_leaves_out_the_events_the_table_holds_but_its_own_earlier_attempt(
    spark: SparkSession, table: HiveTable
) -> None:
    publish(spark, table, "batch-q2-000000000000", rows(spark, ["d1"], BEGINS))  # a replay's
    tag = "rd-0123456789ab-00000"
    publish(spark, table, tag, rows(spark, ["d3"], BEGINS))  # its first attempt, then died
    slice_ = rows(spark, ["d1", "d2", "d3"], BEGINS + 5)

    left = table.not_held(spark, slice_, tag)
    publish(spark, table, tag, left)

    assert sorted(r.guid for r in left.collect()) == ["d2", "d3"]
    assert holds(spark, table) == ["d1", "d2", "d3"]


def test_a_file_and_what_a_swap_left_of_it_are_each_kept_under_a_name_of_their_own(
    spark: SparkSession, table: HiveTable
) -> None:
    # A slice and, beside it, what an earlier swap left of it (a crash between its moves and
    # its deletions): one base name, two files, each with a row another replay batch writes.
    publish(spark, table, "rd-0123456789ab-00000", rows(spark, ["d1", "d2"], BEGINS))
    fs, path = table.fs(spark)
    [slice_] = table.files(spark, "rd-*")
    left = path(
        slice_.getPath().getParent(), slice_.getPath().getName().replace(".", ".0a1b2c3d.", 1)
    )
    fs.copyFromLocalFile(False, True, slice_.getPath(), left)  # same rows, the remnant's name
    replay = "batch-q2-000000000000"
    frame = rows(spark, ["d1"], BEGINS + 20)
    publish(spark, table, replay, frame)

    table.replace_copies(spark, [HOUR], frame, replay)

    assert holds(spark, table) == ["d1", "d2", "d2"]  # each file's d2 kept, neither overwritten
