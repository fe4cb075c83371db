"""The load test's producers against a stand-in proxy on a real socket: what is refused is
sent again as Retry-After says, never counted as acknowledged until it is, and a 503 that does
not say when to come back is counted apart (the proxy must always say)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from keystone.loadtest.driver import Plan, drive_proxy


class Proxy(BaseHTTPRequestHandler):
    """Answers 503 without Retry-After, then 503 with it, then 202 for every request after."""

    answered: ClassVar[list[int]] = []

    def do_POST(self) -> None:
        events = self.rfile.read(int(self.headers["Content-Length"])).split(b"\n")
        n = len(Proxy.answered)
        status = 503 if n < 2 else 202
        body = {"guids": [f"g{n}-{i}" for i in range(len(events))]} if status == 202 else {}
        data = json.dumps(body).encode()
        self.send_response(status)
        if n == 1:
            self.send_header("Retry-After", "0")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        Proxy.answered.append(status)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def proxy() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Proxy.answered = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_refused_events_are_sent_again_and_a_bare_503_is_counted(proxy: str) -> None:
    plan = Plan(stream="lt", rate=20, duration=1.0, event_size=200, producers=1)
    load = asyncio.run(drive_proxy(plan, proxy, "key", lambda _load: None))
    assert Proxy.answered[:2] == [503, 503]
    assert load.without_retry_after == 1  # the first 503 only
    assert len(load.guids) == load.attempted >= 20 and load.abandoned == 0  # all, in the end
    statuses: Counter[int] = Counter()
    for second in load.seconds.values():
        statuses.update(second.statuses)
    assert statuses[503] == 2 and statuses[202] >= 1
