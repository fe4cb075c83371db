"""What the benchmarks share: the 1 KB event, the machine's description and how steadily its CPUs
run, and the sections of docs/benchmarks.md each benchmark rewrites."""

from __future__ import annotations

import json
import os
import platform
import re
import time
from dataclasses import dataclass
from pathlib import Path

# `make bench` runs in the checkout, whose benchmark page it rewrites.
DOCS = Path("docs") / "benchmarks.md"


def make_event(seq: int, object_fields: int = 0) -> bytes:
    """A realistic 1 KB event: nested fields, varied types, and a text payload. With
    `object_fields`, its `device` and `user` objects hold that many more fields each (the event
    then outgrows 1 KB: a richer event, whose objects a reader reads a field or two of)."""
    event = {
        "event": "playback_start",
        "seq": seq,
        "country": "US",
        "device": {"type": "tv", "model": "acme-4k", "os": "tvos 17.2"},
        "user": {"id": 1000 + seq % 5000, "profile": "kids" if seq % 7 == 0 else "main"},
        "title": "The Long Night, Part 2",
        "bitrate_kbps": 5800,
        "cdn": "oca-lax-17",
        "latency_ms": 42.5,
        "muted": False,
        "variant": "a" if seq % 2 == 0 else "b",  # a filter on it keeps half
    }
    for i in range(object_fields):
        event["device"][f"attr{i}"] = f"value-{i}"
        event["user"][f"pref{i}"] = {"on": i % 2 == 0, "level": i}
    pad = 1024 - len(json.dumps(event, separators=(",", ":"))) - len(',"notes":""')
    event["notes"] = "x" * max(0, pad)
    return json.dumps(event, separators=(",", ":")).encode()


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory = (
        int(
            next(
                line.split()[1]
                for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")
            )
        )
        / 1024**2
    )
    return f"{os.cpu_count()} cores ({cpu}), {memory:.0f} GiB, {platform.platform()}"


@dataclass
class Steadiness:
    """The CPU time one fixed unit of work took, sampled on an idle machine (µs). On a VM whose
    host shares its cores the same unit runs at different speeds from one second to the next,
    and a latency measured then feels it."""

    p10_us: float
    p50_us: float
    p90_us: float
    full_speed: float  # the share of samples within 15% of the fastest (its 1st percentile)

    @classmethod
    def of(cls, samples: list[float]) -> Steadiness:
        samples = sorted(samples)
        n, fastest = len(samples), samples[len(samples) // 100]
        return cls(
            samples[n // 10],
            samples[n // 2],
            samples[9 * n // 10],
            sum(s <= 1.15 * fastest for s in samples) / n,
        )

    def __str__(self) -> str:
        return (
            f"a fixed unit of work took {self.p10_us:.0f} / {self.p50_us:.0f} / "
            f"{self.p90_us:.0f} µs of CPU (p10 / p50 / p90), at full speed "
            f"{self.full_speed:.0%} of the time"
        )


def cpu_steadiness(seconds: float = 10.0) -> Steadiness:
    """Samples every 20 ms for `seconds`. CPU time, not wall time: a slower CPU shows, time
    spent waiting for one does not."""
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.thread_time_ns()
        sum(range(20_000))  # about 250 µs at full speed on the machine of docs/benchmarks.md
        samples.append((time.thread_time_ns() - start) / 1000)
        time.sleep(0.02)
    return Steadiness.of(samples)


def write_section(marker: str, heading: str, section: str) -> None:
    """Replaces the text between `<!-- marker:begin -->` and `<!-- marker:end -->`, or appends
    it under `## heading`."""
    begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
    text = DOCS.read_text() if DOCS.exists() else "# Benchmarks\n"
    block = f"{begin}\n{section}{end}"
    if begin in text:
        text = re.sub(f"{re.escape(begin)}.*?{re.escape(end)}", lambda _: block, text, flags=re.S)
    else:
        text = f"{text.rstrip()}\n\n## {heading}\n\n{block}\n"
    DOCS.write_text(text)
