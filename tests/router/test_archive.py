"""The archive's retention on its own: hours wholly past `archive.keep_days` dropped by a thread
of the router's that looks every hour, batches or not, and a failing look does not end it; the
span it holds, for a backfill's plan, follows its drops and its batches' oldest events (the
real drop, in the metastore: tests/router/test_recovery.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from keystone.contracts.recovery import ArchiveSpan
from keystone.contracts.settings import Settings
from keystone.contracts.spec import load_spec
from keystone.router.archive import ArchiveWriter, archive_checkpoint, hour_start
from tests.support.waiting import eventually


def _hour(seconds_ago: float) -> tuple[int, int]:
    return _hour_at(time.time() - seconds_ago)


def _hour_at(epoch_seconds: float) -> tuple[int, int]:
    at = time.gmtime(epoch_seconds)
    return int(time.strftime("%Y%m%d", at)), at.tm_hour


@dataclass
class RecordingSpark:
    """Answers SHOW PARTITIONS with `held` (failing the first `failures` times), and records
    the statements it is given."""

    held: list[tuple[int, int]]
    failures: int = 0
    statements: list[str] = field(default_factory=list)

    def sql(self, text: str) -> Any:
        if text.startswith("SHOW") and self.failures:
            self.failures -= 1
            raise RuntimeError("the metastore is away")
        self.statements.append(text)
        rows = [(f"dateint={d}/hour={h}",) for d, h in self.held] if text.startswith("SHOW") else []
        return SimpleNamespace(collect=lambda: rows)


def test_an_idle_archive_drops_the_hours_past_retention_on_a_thread_of_its_own(
    tmp_path: Path,
) -> None:
    spec = load_spec({"name": "plays", "owner": "team-a", "archive": {"keep_days": 2}})
    archive = ArchiveWriter(Settings(state_dir=tmp_path), spec)
    old, kept = _hour(3 * 86400), _hour(86400)  # three days back: past; one day back: within
    spark = RecordingSpark(held=[old, kept], failures=1)
    stop = threading.Event()
    thread = archive.keep_expiring(spark, stop, every=0.05)  # type: ignore[arg-type]
    try:
        drop = f"PARTITION (dateint={old[0]}, hour={old[1]})"
        eventually("the old hour dropped", lambda: any(drop in s for s in spark.statements), 10)
        within = f"PARTITION (dateint={kept[0]}, hour={kept[1]})"
        assert not any(within in s for s in spark.statements)
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()  # it ends with the router


def test_the_span_begins_at_the_oldest_event_and_moves_with_the_hours_dropped(
    tmp_path: Path,
) -> None:
    settings = Settings(state_dir=tmp_path)
    spec = load_spec({"name": "plays", "owner": "team-a", "archive": {"keep_days": 2}})
    archive = ArchiveWriter(settings, spec)
    old, kept, newer = _hour(3 * 86400), _hour(86400), _hour(3600)

    def span() -> float | None:
        return ArchiveSpan.load(ArchiveSpan.of(tmp_path, "plays")).first

    archive.expire(RecordingSpark(held=[old, kept, newer]))  # type: ignore[arg-type]
    assert span() == hour_start(*kept)  # the dropped hour is not held any more
    archive.held_from(hour_start(*newer) + 12.5)  # a batch of a later hour: no change
    assert span() == hour_start(*kept)
    earlier = hour_start(*kept) - 7200 + 0.25  # events ingested two hours before, imported late
    archive.held_from(earlier)
    assert span() == earlier
    # A router started again reads it, and keeps it when the hour it is in is the first held
    # (an archive's first hour begins where the topic did, within it).
    again = ArchiveWriter(settings, spec)
    assert again.span.first == earlier
    again.expire(RecordingSpark(held=[_hour_at(earlier), kept]))  # type: ignore[arg-type]
    assert span() == earlier
    # An archive emptied by its retention holds none.
    again.expire(RecordingSpark(held=[old]))  # type: ignore[arg-type]
    assert span() is None


@dataclass
class SlowSpark(RecordingSpark):
    """Lists the hours, then lets a batch archive older events before the look ends."""

    meanwhile: Callable[[], None] = lambda: None

    def sql(self, text: str) -> Any:
        answer = super().sql(text)
        if text.startswith("SHOW"):
            self.meanwhile()
        return answer


def test_a_batch_archived_while_the_hours_are_looked_at_is_not_saved_over(
    tmp_path: Path,
) -> None:
    spec = load_spec({"name": "plays", "owner": "team-a", "archive": {"keep_days": 2}})
    archive = ArchiveWriter(Settings(state_dir=tmp_path), spec)
    kept = _hour(86400)
    older = hour_start(*kept) - 3 * 3600 + 0.5
    archive.expire(SlowSpark(held=[kept], meanwhile=lambda: archive.held_from(older)))  # type: ignore[arg-type]
    assert ArchiveSpan.load(ArchiveSpan.of(tmp_path, "plays")).first == older


class Publishing:
    """The archive's table, where a batch's rows are published: what it was given."""

    def __init__(self) -> None:
        self.published: list[str] = []

    def stage(self, rows: DataFrame, tag: str) -> str:
        return f"staged/{tag}"

    def publish(self, spark: SparkSession, staging: str, tag: str) -> list:
        self.published.append(tag)
        return []


def test_a_batch_moves_the_span_back_to_its_oldest_event(
    spark: SparkSession, tmp_path: Path
) -> None:
    spec = load_spec({"name": "plays", "owner": "team-a"})
    archive = ArchiveWriter(Settings(state_dir=tmp_path), spec)
    archive.table = Publishing()  # type: ignore[assignment]
    checkpoint = archive_checkpoint(Settings(state_dir=tmp_path), "plays")  # home's query
    checkpoint.mkdir(parents=True)
    (checkpoint / "metadata").write_text('{"id": "q1"}')
    now_ms = int(time.time() * 1000)
    older = now_ms - 7_200_123

    def batch(*stamps: int) -> DataFrame:
        return spark.createDataFrame([(s,) for s in stamps], "timestamp BIGINT")

    assert archive.write_batch(batch(now_ms, older), 0).delivered == 2
    assert archive.span.first == older / 1000
    archive.write_batch(batch(now_ms), 1)  # newer: no move
    assert ArchiveSpan.load(ArchiveSpan.of(tmp_path, "plays")).first == older / 1000
    assert archive.table.published == ["batch-q1-000000000000", "batch-q1-000000000001"]


@dataclass
class CatalogSpark(RecordingSpark):
    """A metastore holding the archive table with `columns`: answers DESCRIBE and the catalog's
    column listing, and records the statements."""

    columns: list[str] = field(default_factory=list)

    def sql(self, text: str) -> Any:
        if text.startswith("DESCRIBE"):
            self.statements.append(text)
            location = SimpleNamespace(col_name="Location", data_type="file:/warehouse/t")
            return SimpleNamespace(collect=lambda: [location])
        return super().sql(text)

    @property
    def catalog(self) -> Any:
        return SimpleNamespace(
            listColumns=lambda _table: [SimpleNamespace(name=c) for c in self.columns]
        )


def test_an_archive_made_before_the_cluster_column_gains_it_and_a_new_one_is_left_alone(
    tmp_path: Path,
) -> None:
    spec = load_spec({"name": "plays", "owner": "team-a"})
    archive = ArchiveWriter(Settings(state_dir=tmp_path), spec)
    before = ["guid", "timestamp", "key", "value", "partition", "offset", "dateint", "hour"]
    old = CatalogSpark(held=[], columns=before)
    archive.prepare(old)  # type: ignore[arg-type]
    table = "`keystone`.`plays__archive`"
    assert f"ALTER TABLE {table} ADD COLUMNS (cluster STRING)" in old.statements
    new = CatalogSpark(held=[], columns=[*before, "cluster"])
    archive.prepare(new)  # type: ignore[arg-type]
    assert not any(s.startswith("ALTER") for s in new.statements)
