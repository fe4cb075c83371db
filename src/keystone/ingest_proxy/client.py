"""Keystone's producer wrapper: send events to a stream, through the proxy or straight to Kafka.

`ProxyClient` batches events as NDJSON, retries what was not accepted (honouring Retry-After,
else with capped exponential backoff), and never resends an event the proxy acknowledged.
`DirectProducer` is for producers that bypass HTTP: it stamps the same metadata and waits for
Kafka's acknowledgement of every event.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from confluent_kafka import Producer

from keystone.contracts import envelope, fronting, kafka_clients
from keystone.contracts.errors import BadRequest, KeystoneError, PayloadTooLarge, Unavailable
from keystone.contracts.fronting import Active
from keystone.contracts.names import fronting_topic
from keystone.contracts.registry import RegistryReader
from keystone.contracts.settings import MAX_EVENT_BYTES, RECORD_HEADROOM, Settings


class SendFailed(KeystoneError):
    """The proxy refused events for good (bad input, unknown stream, no right to write)."""


@dataclass
class SendResult:
    guids: list[str] = field(default_factory=list)  # in the order the events were given
    retries: int = 0


def _as_bytes(event: dict[str, Any] | bytes | str) -> bytes:
    if isinstance(event, bytes):
        return event
    if isinstance(event, str):
        return event.encode()
    return json.dumps(event, separators=(",", ":")).encode()


def _batches(events: Iterable[Any], size: int) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    for event in events:
        batch.append(_as_bytes(event))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


class ProxyClient:
    def __init__(
        self,
        url: str,
        key: str,
        *,
        batch_size: int = 100,
        max_attempts: int = 10,
        backoff: float = 0.2,
        max_backoff: float = 10.0,
        timeout: float = 30.0,
    ) -> None:
        self._http = httpx.Client(
            base_url=url,
            timeout=timeout,
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/x-ndjson"},
        )
        self.batch_size = batch_size
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.max_backoff = max_backoff

    def __enter__(self) -> ProxyClient:
        return self

    def __exit__(self, *_: object) -> None:
        self._http.close()

    def send(self, stream: str, events: Iterable[Any], key: str | None = None) -> SendResult:
        result = SendResult()
        for batch in _batches(events, self.batch_size):
            guids, retries = self._send_batch(stream, batch, key)
            result.guids.extend(guids)
            result.retries += retries
        return result

    def _send_batch(
        self, stream: str, batch: list[bytes], key: str | None
    ) -> tuple[list[str], int]:
        guids: list[str | None] = [None] * len(batch)
        todo = list(range(len(batch)))  # positions in `batch` still to be accepted
        params = {"key": key} if key else None
        for attempt in range(self.max_attempts):
            wait = min(self.max_backoff, self.backoff * 2**attempt)
            try:
                response = self._http.post(
                    f"/v1/streams/{stream}/events",
                    params=params,
                    content=b"\n".join(batch[i] for i in todo),
                )
            except httpx.TransportError:
                time.sleep(wait)
                continue
            body = response.json() if response.content else {}
            if response.status_code == 202:
                for i, guid in zip(todo, body["guids"], strict=True):
                    guids[i] = guid
                return [g for g in guids if g is not None], attempt
            fits = _fits(response.status_code, body, len(todo))
            if fits and fits < len(todo):  # more than one request may hold: split
                if body.get("setting") != "max_request_bytes":  # a count: fewer from now on
                    self.batch_size = min(self.batch_size, fits)
                retries = attempt
                for start in range(0, len(todo), fits):
                    part = todo[start : start + fits]
                    sent, again = self._send_batch(stream, [batch[i] for i in part], key)
                    for i, guid in zip(part, sent, strict=True):
                        guids[i] = guid
                    retries += again
                return [g for g in guids if g is not None], retries
            if response.status_code not in (429, 503):
                raise SendFailed(
                    f"{response.status_code}: {body.get('message', response.text)}",
                    status=response.status_code,
                    response=body,
                )
            for accepted in body.get("accepted", []):  # a partial success: keep those
                guids[todo[accepted["index"]]] = accepted["guid"]
            todo = [i for i in todo if guids[i] is None]
            retry_after = response.headers.get("Retry-After")
            time.sleep(float(retry_after) if retry_after else wait)
        raise Unavailable(
            f"{len(todo)} events not accepted after {self.max_attempts} attempts",
            retry_after=self.max_backoff,
        )


# The limits on events per request a 413 can name: the proxy's, and the app's quota.
_SPLITTABLE = ("max_events_per_request", "quota")


def _fits(status: int, body: dict[str, Any], sent: int) -> int:
    """How many events one request may hold, when the proxy refused `sent` for too many, or
    (a request's bytes) half as many, to try again; 0 when splitting cannot help."""
    if status != 413:
        return 0
    if body.get("setting") in _SPLITTABLE:
        return int(body["limit"])
    if body.get("setting") == "max_request_bytes":
        return sent // 2
    return 0


class DirectProducer:
    """Writes to a stream's fronting topic with the proxy's metadata, skipping HTTP, and holds
    events to the proxy's size limit (the router's dead letters carry an event whole). Logged
    in as an app's own Kafka user, it stamps that app only: Kafka cannot tell a record's
    reader who wrote it, so the one honest client must not name another."""

    def __init__(
        self,
        kafka: dict[str, Any],
        app: str,
        ack_timeout: float = 30.0,
        max_event_bytes: int = MAX_EVENT_BYTES,
    ) -> None:
        user = kafka.get("sasl.username", "")
        if user.startswith(kafka_clients.APP_USER_PREFIX) and user != kafka_clients.app_user(app):
            raise BadRequest(f"logged in to Kafka as {user}, this producer writes as that app only")
        self.app = app
        self.max_event_bytes = max_event_bytes
        self.host = socket.gethostname()
        self.ack_timeout = ack_timeout
        self._producer = Producer(
            kafka
            | {
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": int(ack_timeout * 1000),
                "message.max.bytes": max_event_bytes + RECORD_HEADROOM,
            }
        )

    def send(self, stream: str, events: Iterable[Any], at: int | None = None) -> SendResult:
        """`at`: the events' ingest time (epoch ms; default now), for the envelope and for
        Kafka's timestamp alike (an import of events from elsewhere, a test of hours past)."""
        topic = fronting_topic(stream)
        stamp = at if at is not None else int(time.time() * 1000)
        common = envelope.common_headers(stamp, self.host, self.app, stream)
        guids: list[str] = []
        failures: list[str] = []

        def delivered(err, _msg) -> None:
            if err is not None:
                failures.append(err.str())

        values = [_as_bytes(event) for event in events]
        for index, value in enumerate(values):  # all checked before any is sent
            if len(value) > self.max_event_bytes:
                raise PayloadTooLarge(
                    f"event {index} is {len(value)} bytes; the limit is {self.max_event_bytes}",
                    index=index,
                    setting="max_event_bytes",
                    limit=self.max_event_bytes,
                )
        for value in values:
            guid = str(uuid.uuid4())
            guids.append(guid)
            while True:
                try:
                    self._producer.produce(
                        topic,
                        value,
                        guid.encode(),
                        headers=envelope.event_headers(guid.encode(), common),
                        on_delivery=delivered,
                        timestamp=stamp,
                    )
                    break
                except BufferError:
                    self._producer.poll(0.1)
        remaining = self._producer.flush(self.ack_timeout)
        if failures or remaining:
            raise Unavailable(
                f"Kafka did not acknowledge {len(failures) + remaining} of {len(guids)} events",
                retry_after=2,
            )
        return SendResult(guids=guids)


class FollowingProducer:
    """`DirectProducer`s, one per fronting cluster, each stream's events sent to the cluster
    the registry says takes its writes now (read again whenever the registry's version moved:
    one GET a send). What the proxy does per request, for a producer that skips HTTP."""

    def __init__(
        self, settings: Settings, registry: RegistryReader, app: str, **options: Any
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.producers = {
            c.name: DirectProducer(kafka_clients.librdkafka(c.connect(settings)), app, **options)
            for c in fronting.clusters(settings)
        }
        self._version = -1
        self._active = Active(cluster=settings.fronting_clusters[0])

    def active(self, stream: str) -> str:
        version = self.registry.version()
        if version != self._version:
            self._active, self._version = self.registry.fronting(self.settings), version
        return self._active.of(stream)

    def send(self, stream: str, events: Iterable[Any], at: int | None = None) -> SendResult:
        return self.producers[self.active(stream)].send(stream, events, at)


def direct_producer(
    settings: Settings, app: str, **options: Any
) -> DirectProducer | FollowingProducer:
    """A producer that skips HTTP for these settings: with several fronting clusters, one that
    follows the registry's choice (and reads Redis to), else one of the only cluster."""
    if len(settings.fronting_clusters) == 1:
        return DirectProducer(kafka_clients.librdkafka(settings), app, **options)
    return FollowingProducer(settings, RegistryReader.connect(settings), app, **options)
