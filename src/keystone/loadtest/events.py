"""Realistic events for the demo and the load test: playback telemetry with varied fields,
types, nesting, levels and countries, a partition-worthy user id, and a text field that brings
each event to a size drawn around the chosen one (half to one and a half times it, the chosen
size on average). Seeded, so a run can be repeated exactly."""

from __future__ import annotations

import json
import random
from typing import Any

TITLES = ("Stranger Things", "The Crown", "Dark", "Narcos", "Ozark", "Lupin", "Squid Game")
COUNTRIES = ("US", "CA", "BR", "GB", "FR", "DE", "IN", "JP", "KR", "MX")
DEVICES = (
    ("tv", "tizen 8"),
    ("phone", "ios 18"),
    ("phone", "android 15"),
    ("web", "chrome"),
    ("console", "ps5"),
    ("test", "emulator"),
)
LEVELS = ("info",) * 90 + ("warn",) * 7 + ("error",) * 3  # a realistic mix: errors are rare
EVENTS = ("play", "pause", "seek", "stop", "error", "rebuffer")


class EventMaker:
    def __init__(self, seed: int = 7, size: int = 1024) -> None:
        self.rng = random.Random(seed)
        self.size = size

    def __call__(self, seq: int) -> dict[str, Any]:
        rng = self.rng
        device, os_name = rng.choice(DEVICES)
        event: dict[str, Any] = {
            "event": rng.choice(EVENTS),
            "seq": seq,
            "level": rng.choice(LEVELS),
            "title": rng.choice(TITLES),
            "country": rng.choice(COUNTRIES),
            "device": {"type": device, "os": os_name},
            "user": {"id": rng.randint(1, 50_000), "kids": rng.random() < 0.1},
            "position_s": round(rng.uniform(0, 7200), 1),
            "bitrate_kbps": rng.choice((235, 750, 1750, 3000, 5800, 16000)),
        }
        if rng.random() < 0.3:
            event["cdn"] = {"node": f"oca-{rng.randint(1, 400)}", "rtt_ms": rng.randint(1, 300)}
        if rng.random() < 0.05:
            event["error_code"] = None  # a JSON null now and then
        size = rng.randint(self.size // 2, self.size * 3 // 2)
        pad = size - len(json.dumps(event, separators=(",", ":"))) - len(',"notes":""')
        if pad > 0:
            event["notes"] = "".join(rng.choices("abcdefghij klmnopqrstuvwxyz", k=pad))
        return event
