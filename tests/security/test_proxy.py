"""A hostile tenant against the ingest proxy, on the real stack (issue 28): bounded requests,
schemas that cannot crash or slow the shared checker, quotas any request can meet, and the
well-behaved tenant (`good`) served meanwhile."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import pytest

from keystone.contracts import http
from keystone.contracts.limits import Limits
from keystone.contracts.names import fronting_topic
from keystone.ingest_proxy.client import ProxyClient
from keystone.router.topics import read_topic
from tests.support.api import Api, owner
from tests.support.good_tenant import Good, raw_request
from tests.support.stack import Stack
from tests.support.waiting import eventually

LIMITS = Limits()
OPTIONAL_RECORD = {
    "type": "record",
    "name": "Event",
    "fields": [
        {
            "name": "user",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "User",
                    "fields": [{"name": "id", "type": "string"}],
                },
            ],
        }
    ],
}


@dataclass
class Hostile:
    stack: Stack
    api: Api
    key: str
    stream: str
    typed: str

    def post(self, stream: str, body: bytes, content_type: str) -> httpx.Response:
        return http.client().post(
            f"{self.stack.address('ingest_proxy')}/v1/streams/{stream}/events",
            content=body,
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": content_type},
            timeout=60,
        )


@pytest.fixture(scope="module")
def hostile(stack: Stack, admin: Api) -> Hostile:
    team = owner(admin, "hostile-proxy")
    app = "hostile-proxy-app"
    key = team.ok("POST", "/v1/apps", {"name": app})["key"]
    plain, typed = "hostile_plain", "hostile_typed"
    base = {"owner": "hostile-proxy", "partitions": 1, "producers": [app]}
    team.ok("POST", "/v1/streams", {"name": plain, **base})
    team.ok("POST", "/v1/streams", {"name": typed, **base, "schema": OPTIONAL_RECORD})
    tenant = Hostile(stack, team, key, plain, typed)
    stack.proxy_current()
    return tenant


def test_events_per_request_are_capped(hostile: Hostile, good: Good) -> None:
    def written() -> set[bytes]:  # the stream's events so far (other tests post to it too)
        return {m.key() for m in read_topic(hostile.stack.kafka(), fronting_topic(hostile.stream))}

    before = written()
    many = b"{}\n" * (LIMITS.max_events_per_request + 1)
    answer = hostile.post(hostile.stream, many, "application/x-ndjson")
    assert answer.status_code == 413, answer.text
    body = answer.json()
    assert body["setting"] == "max_events_per_request"
    assert body["limit"] == LIMITS.max_events_per_request
    as_array = b"[" + b",".join([b"{}"] * (LIMITS.max_events_per_request + 1)) + b"]"
    assert hostile.post(hostile.stream, as_array, "application/json").status_code == 413
    assert written() - before == set()  # nothing of the refused requests

    # The client splits a batch larger than the proxy takes, and every event gets through.
    total = LIMITS.max_events_per_request + 50
    with ProxyClient(hostile.stack.address("ingest_proxy"), hostile.key, batch_size=total) as c:
        sent = c.send(hostile.stream, [{"n": i} for i in range(total)])
    assert len(set(sent.guids)) == total
    good.works()


@pytest.mark.parametrize(
    ("event", "status"),
    [
        (b'{"user": {"id": "u1"}}', 202),
        (b'{"user": null}', 202),
        (b'{"user": {"id": 5}}', 422),
        (b'{"user": 5}', 422),
    ],
)
def test_an_optional_record_is_checked_not_crashed_on(
    hostile: Hostile, good: Good, event: bytes, status: int
) -> None:
    answer = hostile.post(hostile.typed, event, "application/json")
    assert answer.status_code == status, answer.text
    if status == 422:
        [mismatch] = answer.json()["events"]
        assert mismatch["problems"][0]["path"].startswith("user")
    good.works()


def test_a_schema_past_its_limits_is_refused(hostile: Hostile, good: Good) -> None:
    deep: dict = {"type": "record", "name": "L0", "fields": []}
    inner = deep
    for level in range(1, LIMITS.max_schema_depth + 2):
        nested = {"type": "record", "name": f"L{level}", "fields": []}
        inner["fields"].append({"name": f"f{level}", "type": nested})
        inner = nested
    wide = {
        "type": "record",
        "name": "Wide",
        "doc": "x" * LIMITS.max_schema_bytes,
        "fields": [],
    }
    for schema, setting in ((deep, "max_schema_depth"), (wide, "max_schema_bytes")):
        spec = {"name": "hostile_schema", "owner": "hostile-proxy", "schema": schema}
        answer = hostile.api.call("POST", "/v1/streams", spec)
        assert answer.status_code == 422, answer.text
        [problem] = answer.json()["problems"]
        assert problem["field"] == "schema" and problem["setting"] == setting
    good.works()


def test_an_app_over_its_quota_gets_429_before_its_body_is_read(
    hostile: Hostile, good: Good
) -> None:
    slow = "hostile-slow"
    # One event a second: the second's worth spent stays spent for a second, far longer than
    # the next request takes to arrive.
    key = hostile.api.ok("POST", "/v1/apps", {"name": slow, "rate": 1})["key"]
    hostile.api.ok("PUT", f"/v1/streams/{hostile.stream}/producers/{slow}")
    url = hostile.stack.address("ingest_proxy")
    spent = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    eventually(  # the proxy knows the app, and its second's quota is spent
        "the quota spent",
        lambda: (
            http.client()
            .post(
                f"{url}/v1/streams/{hostile.stream}/events",
                content=b"{}",
                headers=spent,
                timeout=10,
            )
            .status_code
            == 429
        ),
    )
    # A megabyte announced, nothing sent: a proxy that read the body first would never answer.
    answer = raw_request(
        url,
        f"POST /v1/streams/{hostile.stream}/events HTTP/1.1\r\nHost: {urlsplit(url).netloc}\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
        "Content-Length: 1000000\r\n",
    )
    assert answer.startswith("HTTP/1.1 429"), answer
    good.works()


def test_a_new_grant_s_series_start_at_zero(hostile: Hostile, good: Good) -> None:
    """The first burst of a new app shows as a rate: its series existed before it."""
    app = "hostile-series"
    hostile.api.ok("POST", "/v1/apps", {"name": app})
    hostile.api.ok("PUT", f"/v1/streams/{hostile.stream}/producers/{app}")
    labels = (f'app="{app}"', f'stream="{hostile.stream}"', 'result="accepted"')

    def announced() -> bool:
        text = (
            http.client().get(f"{hostile.stack.address('ingest_proxy')}/metrics", timeout=10).text
        )
        return any(
            line.startswith("keystone_ingest_events_total{")
            and all(label in line for label in labels)
            and line.endswith(" 0.0")
            for line in text.splitlines()
        )

    eventually("the proxy's series at zero", announced, 30)
    good.works()
