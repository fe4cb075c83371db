"""`keystone demo` (what `make demo` runs after `keystone stack up`) on the test stack: every sink
of the demo stream receives exactly the events it should, and a second run does too."""

from __future__ import annotations

import re

from tests.conftest import Stack, checked


def test_the_demo_delivers_to_every_sink_and_can_run_again(stack: Stack) -> None:
    try:
        for _ in range(2):
            result = checked(stack.keystone("demo", timeout=600))
            rows = {
                m["output"]: (
                    int(m["expected"].replace(",", "")),
                    int(m["received"].replace(",", "")),
                    int(m["dups"]),
                )
                for m in re.finditer(
                    r"│ (?P<output>\w+)\s+│ \w+\s+│ [^│]*│ (?P<expected>[\d,]+)\s+│ "
                    r"(?P<received>[\d,]+)\s+│ (?P<dups>\d+)",
                    result.stdout,
                )
            }
            assert set(rows) == {"errors", "search", "warehouse", "alerts"}, result.stdout
            for output, (expected, received, duplicates) in rows.items():
                assert expected > 0 and received == expected, (output, result.stdout)
                assert duplicates == 0 or output in ("errors", "alerts")
            assert rows["warehouse"][0] == 2000
    finally:
        for stream in ("demo", "demo_alerts"):
            stack.keystone("stream", "delete", stream)
