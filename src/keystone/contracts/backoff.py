"""How long to wait before trying again after failures in a row: exponential, with a ceiling.

One policy, said once, for everything that retries on its own: the router's supervisor (a query
that failed, `router.supervisor`), and the shape control's fleet and jobs use for a router and a
job that ended. The caller counts the failures, and decides when a success has lasted long
enough to start counting again: that differs from one to the next.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """`first` seconds after one failure, `factor` times more after each further one in a row,
    never more than `most`: `Backoff(1.0, 2.0, 60.0)` waits 1, 2, 4 ... 32, then 60 s."""

    first: float = 1.0
    factor: float = 2.0
    most: float = 60.0

    def __post_init__(self) -> None:
        # A wait that shrank or never came would retry a failing thing as fast as it fails.
        if not 0 < self.first <= self.most or self.factor < 1:
            raise ValueError(f"not a backoff: {self!r}")

    def delay(self, failures: int) -> float:
        """Seconds to wait after `failures` in a row (none after none)."""
        if failures < 1:
            return 0.0
        try:
            return min(self.most, self.first * self.factor ** (failures - 1))
        except OverflowError:  # some thousand failures in a row: long at the ceiling by then
            return self.most
