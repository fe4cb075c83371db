"""The proxy's view of the registry: streams, app keys and the fronting cluster that takes each
stream's writes, reloaded within a second of any change (it watches the store's version
counter), answered from memory per request."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from keystone.contracts.errors import Forbidden, KeystoneError, NotFound, Unauthorized, Unavailable
from keystone.contracts.fronting import Active
from keystone.contracts.registry import App, RegistryReader, hash_key
from keystone.contracts.schema import parse_schema
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.ingest_proxy.metrics import IngestMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Snapshot:
    version: int = -1
    streams: dict[str, StreamSpec] = field(default_factory=dict)
    schemas: dict[str, Any] = field(default_factory=dict)  # parsed Avro schema per stream
    apps_by_key: dict[str, App] = field(default_factory=dict)
    fronting: Active | None = None  # None until loaded: home


class Registry:
    def __init__(self, settings: Settings, store: RegistryReader, metrics: IngestMetrics) -> None:
        self._settings = settings
        self._store = store
        self._metrics = metrics
        self._refresh = settings.registry_refresh_seconds
        self._snapshot = Snapshot()
        self._parsed: dict[str, Any] = {}  # parsed schemas by their JSON, as last loaded
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="registry", daemon=True)

    def start(self) -> None:
        self._try_reload()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def loaded(self) -> bool:
        return self._snapshot.version >= 0

    def reload(self) -> None:
        version = self._store.version()
        if version == self._snapshot.version:
            return
        streams, schemas, parsed = {}, {}, {}
        for spec in self._store.streams():  # a stream that does not read back is skipped
            try:
                if spec.avro_schema:
                    # Parsed again only when it changed: any tenant can make the registry
                    # reload (a grant, a revoke), and every proxy process reloads it all.
                    text = json.dumps(spec.avro_schema, sort_keys=True)
                    known = self._parsed.get(text)
                    parsed[text] = known if known is not None else parse_schema(spec.avro_schema)
                    schemas[spec.name] = parsed[text]
            except ValueError as e:  # its events are refused (404), no one else's
                log.warning("skipping stream %r: its schema does not parse: %s", spec.name, e)
                continue
            streams[spec.name] = spec
        self._snapshot = Snapshot(  # one reference swap: readers never see half a reload
            version=version,
            streams=streams,
            schemas=schemas,
            apps_by_key={a.key_sha256: a for a in self._store.apps()},
            fronting=self._store.fronting(self._settings),
        )
        self._parsed = parsed
        self._metrics.registry_version.set(version)
        self._metrics.announce((s.name, app) for s in streams.values() for app in s.producers)

    def _watch(self) -> None:
        while not self._stop.wait(self._refresh):
            self._try_reload()

    def _try_reload(self) -> None:
        """One reload; whatever goes wrong, the thread lives on to try the next one (a thread
        that died would stop seeing key rotations and revocations for good), counted."""
        try:
            self.reload()
        except KeystoneError as e:  # Redis away: keep serving what was loaded, retry soon
            self._metrics.registry_failures.inc()
            log.warning("registry reload failed: %s", e)
        except Exception:
            self._metrics.registry_failures.inc()
            log.exception("registry reload failed")

    def authorize(self, authorization: str | None, stream: str) -> tuple[App, StreamSpec]:
        """The app behind a bearer key, and the stream it may write to; 401, 404 or 403."""
        snapshot = self._snapshot
        if not self.loaded:
            raise Unavailable("the registry is not loaded yet", retry_after=1)
        scheme, _, key = (authorization or "").partition(" ")
        app = (
            snapshot.apps_by_key.get(hash_key(key.strip())) if scheme.lower() == "bearer" else None
        )
        if app is None:
            raise Unauthorized("a valid app key is required: Authorization: Bearer <key>")
        spec = snapshot.streams.get(stream)
        if spec is None:
            raise NotFound(f"no stream {stream!r}")
        if app.name not in spec.producers:
            raise Forbidden(f"app {app.name!r} may not write to stream {stream!r}")
        return app, spec

    def active(self, stream: str) -> str:
        """The fronting cluster that takes the stream's writes now."""
        found = self._snapshot.fronting
        return found.of(stream) if found is not None else self._settings.fronting_clusters[0]

    def active_cluster(self) -> str:
        """The one that takes every stream's writes but those switched alone."""
        found = self._snapshot.fronting
        return found.cluster if found is not None else self._settings.fronting_clusters[0]

    def schema(self, stream: str) -> Any:
        return self._snapshot.schemas.get(stream)
