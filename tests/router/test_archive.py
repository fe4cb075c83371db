"""The archive's retention on its own: hours wholly past `archive.keep_days` dropped by a thread
of the router's that looks every hour, batches or not, and a failing look does not end it; the
span it holds, for a backfill's plan, follows its drops and its batches' oldest events (the
real drop, in the metastore: tests/router/test_recovery.py)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from keystone.contracts.recovery import ArchiveSpan
from keystone.contracts.settings import Settings
from keystone.contracts.spec import load_spec
from keystone.router.archive import ArchiveWriter, hour_start
from tests.support.waiting import eventually


def _hour(seconds_ago: float) -> tuple[int, int]:
    at = time.gmtime(time.time() - seconds_ago)
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


def test_the_span_begins_at_the_first_hour_kept_and_moves_back_for_an_older_batch(
    tmp_path: Path,
) -> None:
    settings = Settings(state_dir=tmp_path)
    spec = load_spec({"name": "plays", "owner": "team-a", "archive": {"keep_days": 2}})
    archive = ArchiveWriter(settings, spec)
    old, kept, newer = _hour(3 * 86400), _hour(86400), _hour(3600)

    def span() -> float | None:
        return ArchiveSpan.load(ArchiveSpan.of(tmp_path, "plays")).first_hour

    archive.expire(RecordingSpark(held=[old, kept, newer]))  # type: ignore[arg-type]
    assert span() == hour_start(*kept)  # the dropped hour is not held any more
    archive.held_from(hour_start(*newer))  # a batch of a later hour: no change
    assert span() == hour_start(*kept)
    earlier = hour_start(*kept) - 7200  # events ingested two hours before, imported late
    archive.held_from(earlier)
    assert span() == earlier
    # A router started again reads it, and an archive emptied by its retention holds none.
    again = ArchiveWriter(settings, spec)
    assert again.span.first_hour == earlier
    again.expire(RecordingSpark(held=[old]))  # type: ignore[arg-type]
    assert span() is None
