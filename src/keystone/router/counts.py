"""What an output did, in numbers: per batch a sink delivers (`Outcome`), per look at an
output's meter (`Counts`), and the delivery latency's histogram buckets both count into. Pure
Python: the sinks, the meter and the metrics all read it, and it reads none of them."""

from __future__ import annotations

from dataclasses import dataclass, field

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


@dataclass
class Outcome:
    """What became of one batch: delivered, or dead-lettered with a reason (never neither),
    and the delivery latency of the delivered events as histogram bucket counts."""

    delivered: int = 0
    dead_lettered: int = 0
    removed: int = 0  # records a backfill took out of the sink (events the output leaves out now)
    transactions: int = 0  # Kafka transactions committed (an exactly-once output)
    aborted: int = 0  # attempts at the batch whose transactions were aborted (it is run again)
    latency: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Counts:
    """What an output's meter counted since the last look."""

    read: int
    matched: int
    delivered: int
    dead_lettered: int  # records too large for the sink, sent to the dead-letter topic
    latency: dict[str, float]  # histogram bucket counts, as `latency_counts`


def latency_counts(seconds: list[float]) -> dict[str, float]:
    """The same aggregates as `latency_columns`, counted in Python (by sinks that write from
    Python anyway)."""
    counts: dict[str, float] = {
        f"le_{bound}": sum(1 for s in seconds if s <= bound) for bound in LATENCY_BUCKETS
    }
    counts["latency_count"] = len(seconds)
    counts["latency_sum"] = sum(seconds)
    return counts


def merge_counts(total: dict[str, float], more: dict[str, float]) -> None:
    for key, value in more.items():
        total[key] = total.get(key, 0) + value
