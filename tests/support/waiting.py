"""Waiting for what happens in other processes, with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable


def eventually(what: str, check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.5)
