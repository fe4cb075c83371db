"""The archive's retention on its own: hours wholly past `archive.keep_days` dropped when the
router's supervisor looks, once an hour, batches or not (the real drop, in the metastore:
tests/router/test_recovery.py)."""

from __future__ import annotations

import calendar
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from keystone.contracts.settings import Settings
from keystone.contracts.spec import load_spec
from keystone.router.archive import EXPIRE_EVERY, ArchiveWriter

NOW = calendar.timegm((2027, 1, 15, 8, 30, 0))


@dataclass
class RecordingSpark:
    """Answers SHOW PARTITIONS with `held`, and records the statements it is given."""

    held: list[tuple[int, int]]
    statements: list[str] = field(default_factory=list)

    def sql(self, text: str) -> Any:
        self.statements.append(text)
        rows = [(f"dateint={d}/hour={h}",) for d, h in self.held] if text.startswith("SHOW") else []
        return SimpleNamespace(collect=lambda: rows)


def test_an_idle_archive_drops_the_hours_past_retention_once_an_hour(tmp_path: Path) -> None:
    spec = load_spec({"name": "plays", "owner": "team-a", "archive": {"keep_days": 2}})
    clock = [1000.0]
    archive = ArchiveWriter(Settings(state_dir=tmp_path), spec, clock=lambda: clock[0])
    # Two days and one hour back, wholly past; two days back, its last half hour within.
    spark = RecordingSpark(held=[(20270113, 7), (20270113, 8), (20270115, 8)])
    assert archive.expire_when_due(spark) == []  # `prepare` has just looked
    assert spark.statements == []
    clock[0] += EXPIRE_EVERY
    dropped = archive.expire(spark, now=NOW)  # what a look at NOW drops
    assert dropped == [(20270113, 7)]
    assert spark.statements[-1].endswith("PARTITION (dateint=20270113, hour=7)")
    spark.statements.clear()
    clock[0] += EXPIRE_EVERY - 1
    assert archive.expire_when_due(spark) == [] and spark.statements == []
    clock[0] += 1
    archive.expire_when_due(spark)  # an hour after the last look: it looks again
    assert spark.statements and spark.statements[0].startswith("SHOW PARTITIONS")
