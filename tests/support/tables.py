"""Hive tables read back in tests, through one Spark application kept open."""

from __future__ import annotations

import json
from typing import Any

from tests.support.stack import Stack


class Tables:
    """Hive tables read through the metastore by one Spark application kept for the module
    (`tests.router.spark_jobs read-tables`): a `keystone sql` a read would start one each time."""

    def __init__(self, stack: Stack) -> None:
        self.log = (stack.state_dir / "read-tables.log").open("w")
        self.job = stack.python("-m", "tests.router.spark_jobs", "read-tables", stderr=self.log)
        assert self._answer() == "ready"

    def _answer(self) -> Any:
        line = self.job.stdout.readline()
        assert line, f"the table reader ended; see {self.log.name}"
        return json.loads(line)

    def read(self, table: str) -> list[dict]:
        self.job.stdin.write(f"{table}\n")
        self.job.stdin.flush()
        return self._answer()

    def archive_files(self, stream: str, start_ms: int, end_ms: int) -> list[str]:
        """The files a backfill of [start_ms, end_ms) reads from the stream's archive."""
        asked = {"archive": stream, "from": start_ms, "to": end_ms}
        self.job.stdin.write(json.dumps(asked) + "\n")
        self.job.stdin.flush()
        return self._answer()

    def close(self) -> None:
        self.job.stdin.close()
        self.job.wait(timeout=60)
        self.log.close()
