"""The ingest proxy: `create_app(settings)`, its routes thin over `Proxy.ingest`.

Run by the stack as `python -m keystone.ingest_proxy.serve`: several processes, each one uvicorn
server.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import socket
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import redis.asyncio as aioredis
from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from keystone.contracts import envelope, fronting
from keystone.contracts.errors import KeystoneError, PayloadTooLarge, SchemaMismatch, Unavailable
from keystone.contracts.names import fronting_topic
from keystone.contracts.registry import RegistryReader
from keystone.contracts.schema import check_budget, schema_problems
from keystone.contracts.settings import Settings
from keystone.ingest_proxy.events import Event, field, media_type, parse_events
from keystone.ingest_proxy.metrics import UNKNOWN, IngestMetrics
from keystone.ingest_proxy.publisher import Publisher, Record
from keystone.ingest_proxy.quota import Quota
from keystone.ingest_proxy.registry import Registry

log = logging.getLogger(__name__)
# A young collection when 50,000 more container objects live than at the last (Python's default
# is 700): at 700 a request's own records, several per event, set one off mid-request and,
# surviving it, were scanned again in the older generations; they die by reference count.
GC_YOUNG_THRESHOLD = 50_000
# A body up to this size is parsed on the event loop (well under a millisecond; a hop to a
# thread would cost more); a larger one, or any checked against a schema, in a worker thread,
# so one tenant's big or schema-checked posts never hold up another's requests or /healthz.
INLINE_BYTES = 64 * 1024
KAFKA_PROBE_SECONDS = 1.0  # between probes of each fronting cluster (a metadata request)
LOST_AFTER_PROBES = 2  # failed in a row: its pending events are given up


class Accepted(BaseModel):
    stream: str
    count: int
    guids: list[str]


class Proxy:
    """Everything one post of events goes through, in order; each refusal a typed error."""

    def __init__(
        self,
        settings: Settings,
        registry: Registry,
        publishers: dict[str, Publisher],
        quota: Quota,
        metrics: IngestMetrics,
    ) -> None:
        """`publishers`: one per fronting cluster, by name; a stream's events go to the one
        the registry says takes its writes now."""
        self.settings = settings
        self.registry = registry
        self.publishers = publishers
        self.quota = quota
        self.metrics = metrics
        self.host = socket.gethostname()
        self.reachable = dict.fromkeys(publishers, False)
        self._stop = threading.Event()
        # A thread per cluster: a lost one takes its probe's whole timeout.
        self._watchers = [
            threading.Thread(
                target=self._watch_kafka, args=(name,), name=f"kafka-{name}", daemon=True
            )
            for name in publishers
        ]

    @property
    def kafka_reachable(self) -> bool:
        """Whether the cluster taking every stream's writes (but those switched alone) answers."""
        return self.reachable[self.registry.active_cluster()]

    def start(self) -> None:
        for name, publisher in self.publishers.items():
            self.reachable[name] = publisher.reachable()
        for watcher in self._watchers:
            watcher.start()

    def stop(self) -> None:
        self._stop.set()
        for watcher in self._watchers:
            watcher.join()

    def _watch_kafka(self, cluster: str) -> None:
        """Probes the cluster (a second apart where writes can move elsewhere, two else). With
        several clusters, one that failed two probes in a row is lost: its pending events are
        given up at once (503), to be sent again where the writes go; with one, they are left
        to their acknowledgement's timeout, as a slow probe is no reason to fail them."""
        several = len(self.publishers) > 1
        failed = 0
        while not self._stop.wait(KAFKA_PROBE_SECONDS if several else 2 * KAFKA_PROBE_SECONDS):
            reachable = self.publishers[cluster].reachable()
            failed = 0 if reachable else failed + 1
            self.reachable[cluster] = reachable  # before giving up: no new event is sent there
            if several and failed == LOST_AFTER_PROBES:
                log.warning("fronting cluster %s is lost: its pending events fail", cluster)
                self.publishers[cluster].abandon()

    async def ingest(self, stream: str, request: Request, key_path: str | None) -> Accepted:
        started = time.perf_counter()
        app_name, stream_label = UNKNOWN, UNKNOWN
        count = 0
        try:
            app, spec = self.registry.authorize(request.headers.get("authorization"), stream)
            app_name, stream_label = app.name, spec.name
            kind = media_type(request.headers.get("content-type"))
            declared = request.headers.get("content-length", "")
            if not declared.isdigit() or int(declared) > INLINE_BYTES:
                await self.quota.admits_any(app.name, app.rate)  # before the work, not after
            body = await self._read_body(request)
            if len(body) > INLINE_BYTES or self.registry.schema(stream) is not None:
                events, keys = await run_in_threadpool(
                    self._read_events, stream, body, kind, key_path
                )
            else:
                events, keys = self._read_events(stream, body, kind, key_path)
            count = len(events)
            await self.quota.take(app.name, app.rate, count)
            cluster = self.registry.active(stream)
            if not self.reachable[cluster]:
                raise Unavailable(
                    f"Kafka (fronting cluster {cluster}) is unreachable; nothing was written",
                    retry_after=2,
                )
            accepted = await self._publish(cluster, stream, app.name, events, keys)
        except KeystoneError as error:
            result = "failed" if error.status >= 500 else "rejected"
            accepted_count = len(error.details.get("accepted", []))
            if accepted_count:
                self.metrics.events.labels(stream_label, app_name, "accepted").inc(accepted_count)
            self.metrics.events.labels(stream_label, app_name, result).inc(
                max(count - accepted_count, 1)
            )
            raise
        finally:
            if stream_label != UNKNOWN:
                self.metrics.request_seconds.labels(stream_label).observe(
                    time.perf_counter() - started
                )
        self.metrics.events.labels(stream_label, app_name, "accepted").inc(count)
        return accepted

    async def _read_body(self, request: Request) -> bytes:
        limit = self.settings.max_request_bytes
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise PayloadTooLarge(
                f"the request is {declared} bytes; the limit is {limit}",
                setting="max_request_bytes",
                limit=limit,
            )
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:  # a body without (or lying about) its length
                raise PayloadTooLarge(
                    f"the request is over the limit of {limit} bytes",
                    setting="max_request_bytes",
                    limit=limit,
                )
            chunks.append(chunk)
        return b"".join(chunks)

    def _read_events(
        self, stream: str, body: bytes, kind: str, key_path: str | None
    ) -> tuple[list[Event], list[bytes | None]]:
        """The request's events, checked, and each one's partition key (None: its guid): all
        the work that grows with the body, in one place that can run off the event loop."""
        limits = self.settings
        events = parse_events(body, kind, limits.max_event_bytes, limits.max_events_per_request)
        self._check_schema(stream, events)
        keys = [_key(e.value, key_path) for e in events] if key_path else [None] * len(events)
        return events, keys

    def _check_schema(self, stream: str, events: list) -> None:
        schema = self.registry.schema(stream)
        if schema is None:
            return
        mismatches = [
            {"index": i, "problems": problems}
            for i, event in enumerate(events)
            if (problems := schema_problems(event.value, schema, check_budget(len(event.raw))))
        ]
        if mismatches:
            raise SchemaMismatch(
                f"{len(mismatches)} of {len(events)} events do not match the stream's schema; "
                "nothing was written",
                events=mismatches[:100],
            )

    async def _publish(
        self, cluster: str, stream: str, app: str, events: list, keys: list[bytes | None]
    ) -> Accepted:
        common = envelope.common_headers(int(time.time() * 1000), self.host, app, stream)
        guids = new_guids(len(events))
        records: list[Record] = []
        for guid, event, key in zip(guids, events, keys, strict=True):
            guid_bytes = guid.encode()
            records.append(
                (key or guid_bytes, event.raw, envelope.event_headers(guid_bytes, common))
            )
        errors = await self.publishers[cluster].publish(fronting_topic(stream), records)
        failed = [{"index": i, "reason": e} for i, e in enumerate(errors) if e is not None]
        if failed:
            raise Unavailable(
                f"Kafka did not acknowledge {len(failed)} of {len(events)} events; "
                "retry the failed ones",
                retry_after=2,
                accepted=[
                    {"index": i, "guid": g}
                    for i, (g, e) in enumerate(zip(guids, errors, strict=True))
                    if e is None
                ],
                failed=failed,
            )
        return Accepted(stream=stream, count=len(events), guids=guids)


def new_guids(count: int) -> list[str]:
    """Random (version 4) UUIDs, from one system call for the whole request."""
    raw = bytearray(os.urandom(16 * count))
    raw[6::16] = bytes(b & 0x0F | 0x40 for b in raw[6::16])  # version 4
    raw[8::16] = bytes(b & 0x3F | 0x80 for b in raw[8::16])  # RFC 4122 variant
    h = raw.hex()
    return [
        "-".join(
            (
                h[i : i + 8],
                h[i + 8 : i + 12],
                h[i + 12 : i + 16],
                h[i + 16 : i + 20],
                h[i + 20 : i + 32],
            )
        )
        for i in range(0, 32 * count, 32)
    ]


async def get_proxy(request: Request) -> Proxy:  # async: no thread hop per request
    return request.app.state.proxy


ProxyDep = Annotated[Proxy, Depends(get_proxy)]


def _key(value: dict[str, Any], path: str) -> bytes | None:
    found = field(value, path)
    if found is None:
        return None  # no such field in this event: keyed by its guid
    # A lone surrogate is valid JSON text but no UTF-8: kept as the producer wrote it.
    text = found if isinstance(found, str) else json.dumps(found)
    return text.encode("utf-8", "surrogatepass")


_EVENTS_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "oneOf": [
                        {"type": "object"},
                        {"type": "array", "items": {"type": "object"}, "minItems": 1},
                    ]
                }
            },
            "application/x-ndjson": {"schema": {"type": "string"}},
        },
    }
}


def create_app(settings: Settings) -> FastAPI:
    metrics = IngestMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = RegistryReader.connect(settings)
        registry = Registry(settings, store, metrics)
        quota_redis = aioredis.Redis.from_url(
            settings.redis_url, socket_timeout=2, **settings.redis_client_kwargs()
        )
        publishers = {c.name: Publisher(c.connect(settings)) for c in fronting.clusters(settings)}
        proxy = Proxy(settings, registry, publishers, Quota(quota_redis), metrics)
        registry.start()
        proxy.start()
        app.state.proxy = proxy
        # What startup built lives as long as the process: out of the collector's sight, a
        # full collection (every few seconds under load, ~60 ms each) no longer stalls requests.
        gc.freeze()
        gc.set_threshold(GC_YOUNG_THRESHOLD)
        try:
            yield
        finally:
            proxy.stop()
            registry.stop()
            for publisher in publishers.values():
                publisher.close()
            await quota_redis.aclose()
            store.close()

    app = FastAPI(
        title="Keystone ingest proxy",
        description="Producers post events; each is stamped and in Kafka before the 202.",
        lifespan=lifespan,
    )

    @app.exception_handler(KeystoneError)
    async def _error(_: Request, error: KeystoneError) -> JSONResponse:
        return JSONResponse(error.body(), status_code=error.status, headers=error.headers())

    @app.post(
        "/v1/streams/{stream}/events",
        status_code=202,
        response_model=Accepted,
        openapi_extra=_EVENTS_BODY,
        summary="Post events: one JSON object, a JSON array of objects, or NDJSON",
    )
    async def post_events(
        stream: str,
        request: Request,
        proxy: ProxyDep,
        key: Annotated[str | None, Query(description="Field path of the partition key")] = None,
    ) -> Response:
        accepted = await proxy.ingest(stream, request, key)
        # Serialized here, once: FastAPI's own pass (validate, encode) costs ten times as much.
        return Response(accepted.model_dump_json(), status_code=202, media_type="application/json")

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz(proxy: ProxyDep) -> JSONResponse:
        checks = {
            "registry": proxy.registry.loaded,
            "kafka": proxy.registry.loaded and proxy.kafka_reachable,
        }
        return JSONResponse(
            {"ready": all(checks.values()), **checks},
            status_code=200 if all(checks.values()) else 503,
        )

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    return app


def app_from_env() -> FastAPI:
    """uvicorn's factory: settings from KEYSTONE_* variables."""
    logging.basicConfig(level=logging.INFO)
    return create_app(Settings())
