"""A well-behaved tenant beside the hostile one: a stream with a router delivering to Kafka, an
app posting to it, its alert rules in Prometheus. Every hostile test ends by checking that this
tenant was not hurt: its events still delivered, its rules still loaded, its key still honoured.
"""

from __future__ import annotations

import socket
import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from keystone.contracts import http
from keystone.router.topics import read_topic
from tests.support.api import Api
from tests.support.stack import Stack
from tests.support.waiting import eventually

GOOD_STREAM, GOOD_OWNER, GOOD_APP = "good_tenant", "good-team", "good-app"
GOOD_OUTPUT = {
    "name": "copy",
    # Through the router's own like matcher (router/java/LikeMatcher.java): every marker matches.
    "filter": "marker like '%_%'",
    "sink": {"type": "kafka"},
    "delivery": {"mode": "microbatch", "trigger": "2 seconds"},
    "start": "earliest",
}


@dataclass
class Good:
    stack: Stack
    api: Api
    key: str

    def post(self, event: dict, key: str | None = None) -> httpx.Response:
        return http.client().post(
            f"{self.stack.address('ingest_proxy')}/v1/streams/{GOOD_STREAM}/events",
            json=event,
            headers={"Authorization": f"Bearer {key or self.key}"},
            timeout=30,
        )

    def delivered(self, guid: str) -> bool:
        topic = f"{GOOD_STREAM}.{GOOD_OUTPUT['name']}"
        return guid in {m.key().decode() for m in read_topic(self.stack.kafka(), topic)}

    def rules_loaded(self) -> bool:
        answer = http.client().get(f"{self.stack.address('prometheus')}/api/v1/rules", timeout=10)
        groups = answer.json()["data"]["groups"]
        return f"keystone-stream-{GOOD_STREAM}" in {g["name"] for g in groups}

    def works(self) -> None:
        """Its key is honoured, its event reaches its output, its rules are loaded. (A test
        that changed the registry may have left the proxy a moment behind it.)"""
        answers: list[httpx.Response] = []
        eventually(
            "the proxy to know the stream and the key",
            lambda: (
                answers.append(self.post({"marker": uuid.uuid4().hex}))
                or answers[-1].status_code not in (401, 404)
            ),
            30,
        )
        answer = answers[-1]
        assert answer.status_code == 202, answer.text
        [guid] = answer.json()["guids"]
        eventually("the good tenant's event delivered", lambda: self.delivered(guid), 180)
        eventually("the good tenant's rules loaded", self.rules_loaded, 30)


def raw_request(url: str, head: str) -> str:
    """Sends only a request's head (no body, whatever it announces) and reads the answer: a
    server that waited for the body would never answer, and the read would time out."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as connection:
        connection.sendall(head.encode() + b"\r\n")
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = connection.recv(65536)
            if not chunk:
                break
            answer += chunk
    return answer.decode(errors="replace")
