"""The ingest proxy of the test stack, for real: what Kafka holds after each kind of post.

Each test posts what it looks for, to a stream no other test writes to or among events it tells
by their guids, so that any order of the tests gives the same answers."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable

from keystone.contracts import envelope, http
from keystone.contracts.errors import PayloadTooLarge
from keystone.contracts.names import fronting_topic
from keystone.contracts.processes import PidFile, stop
from keystone.contracts.settings import MAX_EVENT_BYTES
from keystone.ingest_proxy.client import DirectProducer, ProxyClient, SendFailed
from keystone.router.topics import read_topic
from tests.support.stack import Stack, checked
from tests.support.waiting import eventually

SCHEMA = {
    "type": "record",
    "name": "play",
    "fields": [
        {"name": "title", "type": "string"},
        {
            "name": "user",
            "type": {"type": "record", "name": "user", "fields": [{"name": "id", "type": "long"}]},
        },
    ],
}


@dataclass
class Tenant:
    stack: Stack
    url: str
    kafka: dict[str, Any]  # the connection (kafka_clients.librdkafka)
    suffix: str
    keys: dict[str, str]  # app -> key

    def stream(self, name: str) -> str:
        return f"{name}_{self.suffix}"

    def app(self, name: str) -> str:
        return f"{name}-{self.suffix}"

    def post(
        self,
        stream: str,
        body: bytes | str,
        app: str = "player",
        *,
        content_type: str = "application/json",
        **kwargs,
    ) -> httpx.Response:
        headers = {"Content-Type": content_type}
        if app:
            headers["Authorization"] = f"Bearer {self.keys[app]}"
        return http.client().post(
            f"{self.url}/v1/streams/{self.stream(stream)}/events",
            content=body,
            headers=headers,
            timeout=60,
            **kwargs,
        )

    def topic(self, stream: str) -> list:
        return read_topic(self.kafka, fronting_topic(self.stream(stream)))


def _ready(url: str) -> bool:
    """The proxy server this connection reaches answers ready (registry loaded, Kafka up)."""
    try:
        return http.client().get(f"{url}/readyz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _register(stack: Stack, folder: Path, tenant: Tenant) -> None:
    for app, rate in (("player", 0), ("other", 0), ("slow", 5), ("bursty", 50)):
        result = checked(
            stack.keystone("app", "create", tenant.app(app), "--rate", str(rate), "--json")
        )
        tenant.keys[app] = json.loads(result.stdout)["key"]
    producers = [tenant.app(a) for a in ("player", "slow", "bursty")]
    streams = (
        ("open", {}),
        ("stamped", {}),
        ("refused", {}),
        ("typed", {"schema": SCHEMA}),
        ("outage", {}),
        ("crowd", {}),
        ("large", {}),
    )
    for stream, extra in streams:
        spec = {
            "name": tenant.stream(stream),
            "owner": "team-test",
            "partitions": 2,
            "producers": producers,
            **extra,
        }
        path = folder / f"{stream}.json"
        path.write_text(json.dumps(spec))
        checked(stack.keystone("stream", "create", "-f", str(path)))
    stack.proxy_current()


@pytest.fixture(scope="module")
def tenant(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Tenant:
    status = stack.status()["services"]
    handle = Tenant(
        stack,
        status["ingest_proxy"]["address"],
        stack.kafka(),
        uuid.uuid4().hex[:6],
        {},
    )
    _register(stack, tmp_path_factory.mktemp("specs"), handle)
    return handle


def test_events_are_stamped_and_their_bytes_kept(tenant: Tenant) -> None:
    # Its own stream: every message there is one of these posts'.
    array = '[ {"b":1.50, "a" : "é\\u00e9"} ,\n\t{"n": 1e3,"x":[1, {"y":null}]}]'.encode()
    ndjson = b'{"line": 1}\r\n\n{"line":  2 }\n'
    single = b'  {"single": true}  '
    before = int(time.time() * 1000)
    answers = [
        tenant.post("stamped", array),
        tenant.post("stamped", b'[{"refused": 1}, 7]'),  # 400: nothing of it may be written
        tenant.post("stamped", ndjson, content_type="application/x-ndjson"),
        tenant.post("stamped", single, content_type="application/json; charset=utf-8"),
    ]
    after = int(time.time() * 1000)
    assert [a.status_code for a in answers] == [202, 400, 202, 202]
    sent = {
        guid: raw
        for answer, raws in zip(
            (answers[0], answers[2], answers[3]),
            (
                [b'{"b":1.50, "a" : "\xc3\xa9\\u00e9"}', b'{"n": 1e3,"x":[1, {"y":null}]}'],
                [b'{"line": 1}', b'{"line":  2 }'],
                [b'{"single": true}'],
            ),
            strict=True,
        )
        for guid, raw in zip(answer.json()["guids"], raws, strict=True)
    }
    messages = tenant.topic("stamped")
    assert len(messages) == 5
    for message in messages:
        headers = {k: v.decode() for k, v in message.headers()}
        guid = headers[envelope.GUID]
        assert message.value() == sent[guid]  # byte for byte
        assert message.key() == guid.encode()
        assert set(headers) == {"ks_guid", "ks_ts", "ks_host", "ks_app", "ks_stream"}
        assert before <= int(headers[envelope.TIMESTAMP]) <= after
        assert headers[envelope.HOST] == socket.gethostname()
        assert headers[envelope.APP] == tenant.app("player")
        assert headers[envelope.STREAM] == tenant.stream("stamped")
        assert str(uuid.UUID(guid)) == guid


def test_an_event_as_large_as_the_limit_is_accepted_whole(tenant: Tenant) -> None:
    pad = b"x" * (MAX_EVENT_BYTES - len(b'{"pad":""}'))
    answer = tenant.post("large", b'{"pad":"' + pad + b'"}')
    assert answer.status_code == 202, answer.text
    [message] = tenant.topic("large")
    assert message.value() == b'{"pad":"' + pad + b'"}'
    assert dict(message.headers())[envelope.GUID].decode() == answer.json()["guids"][0]


def test_a_field_can_be_the_partition_key(tenant: Tenant) -> None:
    body = b'[{"user": {"id": "u1"}}, {"user": {"id": 7}}, {"other": 1}]'
    answer = tenant.post("crowd", body, params={"key": "user.id"})
    assert answer.status_code == 202
    guids = answer.json()["guids"]
    keys = {
        m.headers()[0][1].decode(): m.key()
        for m in tenant.topic("crowd")
        if m.headers()[0][1].decode() in guids
    }
    assert [keys[g] for g in guids] == [b"u1", b"7", guids[2].encode()]


REFUSALS = [
    ("no key", 401, "Unauthorized"),
    ("wrong key", 401, "Unauthorized"),
    ("not a producer", 403, "Forbidden"),
    ("unknown stream", 404, "NotFound"),
    ("wrong content type", 415, "UnsupportedMediaType"),
    ("not json", 400, "BadRequest"),
    ("not objects", 400, "BadRequest"),
    ("broken ndjson line", 400, "BadRequest"),
    ("event over 1 MiB", 413, "PayloadTooLarge"),
    ("request over 10 MiB", 413, "PayloadTooLarge"),
    ("request over 10 MiB without a length", 413, "PayloadTooLarge"),
    ("schema mismatch", 422, "SchemaMismatch"),
    ("over the quota", 429, "RateLimited"),
    ("more events than the quota", 413, "PayloadTooLarge"),
    ("nested too deep", 400, "BadRequest"),
]


def _refuse(tenant: Tenant, case: str) -> httpx.Response:
    event = b'{"title": "t", "user": {"id": 1}}'
    big = b'{"pad": "' + b"x" * (1024 * 1024) + b'"}'
    many = b"[" + b",".join([b'{"pad": "' + b"x" * 1000 + b'"}'] * 11000) + b"]"
    post = {
        "no key": lambda: tenant.post("refused", event, app=""),
        "wrong key": lambda: http.client().post(
            f"{tenant.url}/v1/streams/{tenant.stream('refused')}/events",
            content=event,
            headers={"Authorization": "Bearer ks_not-a-key", "Content-Type": "application/json"},
        ),
        "not a producer": lambda: tenant.post("refused", event, app="other"),
        "unknown stream": lambda: tenant.post("nosuch", event),
        "wrong content type": lambda: tenant.post("refused", event, content_type="text/plain"),
        "not json": lambda: tenant.post("refused", b'{"a": '),
        "not objects": lambda: tenant.post("refused", b'[{"a": 1}, "b"]'),
        "broken ndjson line": lambda: tenant.post(
            "refused", b'{"a": 1}\n{"a": \n', content_type="application/x-ndjson"
        ),
        "event over 1 MiB": lambda: tenant.post("refused", b"[" + event + b"," + big + b"]"),
        "request over 10 MiB": lambda: tenant.post("refused", many),
        "request over 10 MiB without a length": lambda: tenant.post(
            "refused", iter([many[i : i + 65536] for i in range(0, len(many), 65536)])
        ),
        "schema mismatch": lambda: tenant.post(
            "typed", b'[{"title": "ok", "user": {"id": 1}}, {"title": 5, "user": {"id": "x"}}]'
        ),
        "nested too deep": lambda: tenant.post(
            "refused", b'{"a":' + b"[" * 3000 + b"]" * 3000 + b"}"
        ),
        # A second second's worth at once: the first request (to another stream: it is
        # admitted) took all of this one's.
        "over the quota": lambda: [
            tenant.post(stream, b"[" + b",".join([event] * 5) + b"]", app="slow")
            for stream in ("crowd", "refused")
        ][-1],
        # Never admitted, however long it waits: refused for good, not 429 forever.
        "more events than the quota": lambda: tenant.post(
            "refused", b"[" + b",".join([event] * 6) + b"]", app="slow"
        ),
    }[case]
    return post()


@pytest.fixture(scope="module")
def refusals(tenant: Tenant) -> dict[str, httpx.Response]:
    """Every refused request, made once, in this order (the slow app's quota spent by one case,
    then met again by the next), before a test looks at an answer or at what was written."""
    return {case: _refuse(tenant, case) for case, _, _ in REFUSALS}


@pytest.mark.parametrize(("case", "status", "error"), REFUSALS)
def test_refusals_are_clear(
    refusals: dict[str, httpx.Response], case: str, status: int, error: str
) -> None:
    answer = refusals[case]
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["error"] == error and body["message"]
    if case == "not objects":
        assert body["index"] == 1
    if case == "broken ndjson line":
        assert body["line"] == 2
    if case == "event over 1 MiB":
        assert body["index"] == 1 and body["limit"] == 1024 * 1024
    if case == "schema mismatch":
        assert body["events"] == [
            {
                "index": 1,
                "problems": [
                    {"path": "title", "message": "expected string, got an integer"},
                    {"path": "user.id", "message": "expected long, got a string"},
                ],
            }
        ]
    if status == 401:
        assert answer.headers["WWW-Authenticate"] == "Bearer"
    if status == 429:
        assert answer.headers["Retry-After"] == "1" and body["quota"] == 5
    if case == "more events than the quota":
        assert body["quota"] == body["limit"] == 5 and body["setting"] == "quota"


def test_refused_requests_wrote_nothing(
    tenant: Tenant, refusals: dict[str, httpx.Response]
) -> None:
    assert refusals  # every refused request made (by the fixture) before Kafka is read
    assert tenant.topic("refused") == []
    assert tenant.topic("typed") == []


def test_many_concurrent_clients(tenant: Tenant) -> None:
    results, errors = [], []

    def producer(n: int) -> None:
        try:
            with ProxyClient(tenant.url, tenant.keys["player"], batch_size=25) as client:
                events = [{"producer": n, "seq": i, "pad": "x" * 500} for i in range(500)]
                results.append(client.send(tenant.stream("crowd"), events))
        except Exception as e:  # surfaced below; a thread cannot fail the test itself
            errors.append(e)

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors
    guids = [g for r in results for g in r.guids]
    assert len(guids) == len(set(guids)) == 16 * 500
    in_kafka = {m.headers()[0][1].decode() for m in tenant.topic("crowd")}
    assert set(guids) <= in_kafka


def test_the_client_retries_what_the_quota_refused(tenant: Tenant) -> None:
    with ProxyClient(tenant.url, tenant.keys["bursty"], batch_size=25) as client:
        result = client.send(tenant.stream("open"), [{"burst": i} for i in range(200)])
        with pytest.raises(SendFailed, match="404: no stream"):
            client.send(tenant.stream("nosuch"), [{"x": 1}])
    assert result.retries > 0  # 200 events at 50/s cannot all pass at once
    assert len(set(result.guids)) == 200
    written = [m for m in tenant.topic("open") if m.headers()[0][1].decode() in set(result.guids)]
    assert len(written) == 200  # each exactly once: no accepted event was sent again


def test_direct_producer_stamps_the_same_metadata(tenant: Tenant) -> None:
    producer = DirectProducer(tenant.kafka, tenant.app("player"))
    result = producer.send(tenant.stream("crowd"), [{"direct": 1}, b'{"direct": 2}'])
    found = [m for m in tenant.topic("crowd") if m.headers()[0][1].decode() in result.guids]
    assert sorted(m.value() for m in found) == [b'{"direct": 2}', b'{"direct":1}']
    for m in found:
        headers = dict(m.headers())
        assert set(headers) == {"ks_guid", "ks_ts", "ks_host", "ks_app", "ks_stream"}
        assert headers["ks_app"] == tenant.app("player").encode()

    # Held to the proxy's limit per event: one over it and nothing of the batch is written.
    small = DirectProducer(tenant.kafka, tenant.app("player"), max_event_bytes=100)
    marker = f'{{"direct": "{uuid.uuid4()}"}}'.encode()
    with pytest.raises(PayloadTooLarge, match="event 1 is 101 bytes; the limit is 100"):
        small.send(tenant.stream("crowd"), [marker, b"x" * 101])
    assert small.send(tenant.stream("crowd"), [b"y" * 100]).guids  # the limit itself is fine
    assert marker not in [m.value() for m in tenant.topic("crowd")]


def test_health_readiness_and_metrics(tenant: Tenant) -> None:
    # A post of its own: the request series of a stream appear with its first post.
    assert tenant.post("open", b'{"health": 1}').status_code == 202
    assert http.client().get(f"{tenant.url}/healthz").json() == {"status": "ok"}
    assert http.client().get(f"{tenant.url}/readyz").json() == {
        "ready": True,
        "registry": True,
        "kafka": True,
    }
    text = http.client().get(f"{tenant.url}/metrics").text
    stream, app = tenant.stream("open"), tenant.app("player")
    accepted = f'keystone_ingest_events_total{{app="{app}",result="accepted",stream="{stream}"}}'
    assert accepted in text
    assert f'keystone_ingest_request_seconds_count{{stream="{stream}"}}' in text
    prometheus = tenant.stack.address("prometheus")
    deadline, up = time.monotonic() + 30, []
    while not up and time.monotonic() < deadline:
        up = (
            http.client()
            .get(
                f"{prometheus}/api/v1/query", params={"query": 'up{component="ingest_proxy"} == 1'}
            )
            .json()["data"]["result"]
        )
        time.sleep(1)
    assert up, "Prometheus does not scrape the proxy"


@pytest.mark.exclusive  # it stops or restarts a service every test uses
def test_a_kafka_outage_gives_503s_and_loses_no_acknowledged_event(tenant: Tenant) -> None:
    accepted: list[str] = []
    unavailable: list[httpx.Response] = []
    running = threading.Event()
    running.set()

    def load() -> None:
        n = 0
        while running.is_set():
            n += 1
            body = json.dumps([{"n": n, "i": i} for i in range(10)]).encode()
            try:
                answer = tenant.post("outage", body)
            except httpx.TransportError:
                continue
            if answer.status_code == 202:
                accepted.extend(answer.json()["guids"])
            elif answer.status_code == 503:
                unavailable.append(answer)
                accepted.extend(a["guid"] for a in answer.json().get("accepted", []))
            else:
                raise AssertionError(answer.text)
            time.sleep(0.02)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        time.sleep(3)
        kafka_pidfile = PidFile(tenant.stack.state_dir / "run" / "kafka.pid")
        assert stop(kafka_pidfile, signal.SIGTERM, timeout=60)
        deadline = time.monotonic() + 60
        while not unavailable and time.monotonic() < deadline:
            time.sleep(0.5)
        checked(tenant.stack.keystone("stack", "up", timeout=300))
        time.sleep(5)
    finally:
        running.clear()
        for t in threads:
            t.join(timeout=60)
        # Left as found: every server of the proxy writing again (each looks every 2 s), for
        # the tests after this one.
        eventually(
            "every proxy server ready again",
            lambda: all(_ready(tenant.url) for _ in range(16)),
            timeout=60,
        )
    assert unavailable, "no 503 while Kafka was down"
    assert all(int(r.headers["Retry-After"]) >= 1 for r in unavailable)
    assert {r.json()["error"] for r in unavailable} == {"Unavailable"}
    in_kafka = {m.headers()[0][1].decode() for m in tenant.topic("outage")}
    missing = set(accepted) - in_kafka
    assert not missing, f"{len(missing)} acknowledged events are not in Kafka"
    assert len(accepted) > 100


def test_generated_requests_never_get_a_server_error(tenant: Tenant) -> None:
    """Schemathesis generates requests for every operation of the OpenAPI schema (bodies of
    every documented media type included, aimed at a real stream); none may get a 5xx."""
    schema = schemathesis.openapi.from_url(f"{tenant.url}/openapi.json")
    auth = {"Authorization": f"Bearer {tenant.keys['player']}"}
    server_errors, statuses = [], Counter()
    operations = [
        (result.ok(), mode)
        for result in schema.get_all_operations()
        for mode in schemathesis.GenerationMode  # requests that conform, and ones that violate
    ]
    for operation, mode in operations:

        @settings(
            max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        @given(case=operation.as_strategy(mode))
        def call(case) -> None:
            if "stream" in (case.path_parameters or {}):
                case.path_parameters["stream"] = tenant.stream("open")
            response = case.call(headers=auth)
            statuses[response.status_code] += 1
            if response.status_code >= 500:
                server_errors.append((case.operation.label, response.status_code, response.text))

        try:
            call()
        except Unsatisfiable:
            assert mode is schemathesis.GenerationMode.NEGATIVE  # nothing to violate (no input)
    assert not server_errors, server_errors[:5]
    assert statuses[202] > 0 and statuses[400] + statuses[415] > 0, statuses  # it reached Kafka
