"""What the benchmarks share: the 1 KB event, the machine's description, and the sections of
docs/benchmarks.md each benchmark rewrites."""

from __future__ import annotations

import json
import os
import platform
import re
from pathlib import Path

from contracts.settings import CHECKOUT

DOCS = CHECKOUT / "docs" / "benchmarks.md"


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
