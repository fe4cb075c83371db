"""Waiting for what happens in other processes, with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable

POLL_SECONDS = 0.5


def eventually(
    what: str,
    check: Callable[[], bool],
    timeout: float = 30,
    seen: Callable[[], object] | None = None,
) -> None:
    """Until `check` holds: every half second, or after as long again as the check took. A
    check that reads sinks back (Hive through Spark, whole topics) burns the CPU the processes
    it waits for need on two cores: it takes at most half of the time it waits. `seen`: what
    the failure should show of the last look (the figures the check compared)."""
    deadline = time.monotonic() + timeout
    while True:
        began = time.monotonic()
        if check():
            return
        now = time.monotonic()
        assert now < deadline, f"{what}: not within {timeout:.0f} s" + (
            f"; last seen: {seen()}" if seen else ""
        )
        time.sleep(max(POLL_SECONDS, now - began))
