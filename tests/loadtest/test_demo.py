"""`keystone demo` (what `make demo` runs after `keystone stack up`) on the test stack: every sink
of the demo stream receives exactly the events it should, and a second run does too."""

from __future__ import annotations

import json

from tests.support.stack import Stack, checked


def test_the_demo_delivers_to_every_sink_and_can_run_again(stack: Stack) -> None:
    try:
        for _ in range(2):
            results = json.loads(checked(stack.keystone("demo", "--json", timeout=600)).stdout)
            by_output = {r["output"]: r for r in results}
            assert set(by_output) == {"errors", "errors_once", "search", "warehouse", "alerts"}
            assert by_output["errors_once"]["guarantee"] == "exactly_once"
            assert by_output["errors_once"]["expected"] == by_output["errors"]["expected"]
            for r in results:
                assert r["expected"] > 0 and r["received"] == r["expected"], r
            assert by_output["warehouse"]["expected"] == 2000
            # Idempotent sinks hold no duplicates; Kafka's may only after a crash (none here).
            assert all(r["duplicates"] == 0 for r in results), results
    finally:
        for stream in ("demo", "demo_alerts"):
            stack.keystone("stream", "delete", stream)
