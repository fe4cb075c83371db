"""`keystone demo` (what `make demo` runs after `keystone stack up`) on the test stack: every sink
of the demo stream receives exactly the events it should, and a second run does too."""

from __future__ import annotations

import json
import re

from tests.support.stack import Stack, checked

# Lines of Spark's, log4j's or the JVM's own, which belong in the application's log.
ENGINE_LINE = re.compile(r"WARN|INFO|ERROR|log4j|SLF4J|Picked up|NativeCodeLoader|SparkConf")


def test_the_demo_delivers_to_every_sink_and_can_run_again(stack: Stack) -> None:
    try:
        for _ in range(2):
            run = checked(stack.keystone("demo", "--json", timeout=600))
            results = json.loads(run.stdout)
            by_output = {r["output"]: r for r in results}
            assert set(by_output) == {"errors", "errors_once", "search", "warehouse", "alerts"}
            assert by_output["errors_once"]["guarantee"] == "exactly_once"
            assert by_output["errors_once"]["expected"] == by_output["errors"]["expected"]
            for r in results:
                assert r["expected"] > 0 and r["received"] == r["expected"], r
            assert by_output["warehouse"]["expected"] == 2000
            # Idempotent sinks hold no duplicates; Kafka's may only after a crash (none here).
            assert all(r["duplicates"] == 0 for r in results), results
            # What a person reads (on stderr beside --json, 80 columns in a pipe): the
            # command's own lines, its table folded, not cut.
            shown = run.stderr.splitlines()
            assert [line for line in shown if ENGINE_LINE.search(line)] == []
            rows = [line for line in shown if "│" in line]
            assert len(rows) >= len(results), run.stderr
            assert not any("…" in row for row in rows), run.stderr
    finally:
        for stream in ("demo", "demo_alerts"):
            stack.keystone("stream", "delete", stream)
