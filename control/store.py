"""The registry in Redis: stream specs, producing apps and their (hashed) keys.

Control owns it; the proxy reads it. Every change bumps one version counter, so a reader can
tell in one GET whether anything changed since it last loaded.

    keystone:streams            set of stream names
    keystone:stream:<name>      the spec, JSON
    keystone:apps               set of app names
    keystone:app:<name>         hash: key_sha256, rate (events/s, 0 = unlimited), created
    keystone:key:<sha256>       the app a key belongs to
    keystone:version            incremented on every change
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

import redis
from pydantic import TypeAdapter, ValidationError

from contracts.errors import Conflict, InvalidName, NotFound, Unavailable
from contracts.settings import Settings
from contracts.spec import Principal, StreamSpec

PREFIX = "keystone:"
_APP_NAME = TypeAdapter(Principal)


@dataclass(frozen=True)
class App:
    name: str
    key_sha256: str
    rate: int  # events per second across all proxies; 0 means no quota
    created: float


def hash_key(key: str) -> str:
    # App keys are 256 random bits, so a plain SHA-256 cannot be reversed by guessing; slow
    # password hashes are for secrets people choose. Only the hash is ever stored.
    return hashlib.sha256(key.encode()).hexdigest()


class Store:
    def __init__(self, client: redis.Redis) -> None:
        self.redis = client

    @classmethod
    def connect(cls, settings: Settings) -> Store:
        return cls(redis.Redis.from_url(settings.redis_url, socket_timeout=5))

    def close(self) -> None:
        self.redis.close()

    def version(self) -> int:
        return int(self._call(self.redis.get, f"{PREFIX}version") or 0)

    # Streams

    def put_stream(self, spec: StreamSpec) -> None:
        with self.redis.pipeline() as tx:
            tx.set(f"{PREFIX}stream:{spec.name}", spec.to_json())
            tx.sadd(f"{PREFIX}streams", spec.name)
            tx.incr(f"{PREFIX}version")
            self._call(tx.execute)

    def get_stream(self, name: str) -> StreamSpec:
        raw = self._call(self.redis.get, f"{PREFIX}stream:{name}")
        if raw is None:
            raise NotFound(f"no stream {name!r}")
        return StreamSpec.model_validate_json(raw)

    def streams(self) -> list[StreamSpec]:
        names = sorted(n.decode() for n in self._call(self.redis.smembers, f"{PREFIX}streams"))
        raws = self._call(self.redis.mget, [f"{PREFIX}stream:{n}" for n in names]) if names else []
        return [StreamSpec.model_validate_json(r) for r in raws if r is not None]

    # Apps

    def create_app(self, name: str, rate: int = 0) -> str:
        """Registers a producing app and returns its key: shown once, stored only hashed."""
        try:
            _APP_NAME.validate_python(name)
        except ValidationError as e:
            raise InvalidName(
                f"app name {name!r} is not valid: lower-case letters, digits, '_' "
                "and '-', 2 to 63, starting with a letter"
            ) from e
        key = f"ks_{secrets.token_urlsafe(32)}"
        digest = hash_key(key)
        record = {"key_sha256": digest, "rate": rate, "created": time.time()}
        # Create only if absent, atomically: two concurrent creates cannot both win.
        if not self._call(self.redis.hsetnx, f"{PREFIX}app:{name}", "key_sha256", digest):
            raise Conflict(f"app {name!r} already exists")
        with self.redis.pipeline() as tx:
            tx.hset(f"{PREFIX}app:{name}", mapping=record)
            tx.set(f"{PREFIX}key:{digest}", name)
            tx.sadd(f"{PREFIX}apps", name)
            tx.incr(f"{PREFIX}version")
            self._call(tx.execute)
        return key

    def apps(self) -> list[App]:
        names = sorted(n.decode() for n in self._call(self.redis.smembers, f"{PREFIX}apps"))
        with self.redis.pipeline(transaction=False) as batch:
            for name in names:
                batch.hgetall(f"{PREFIX}app:{name}")
            records = self._call(batch.execute)
        return [
            App(
                name=name,
                key_sha256=r[b"key_sha256"].decode(),
                rate=int(r.get(b"rate", 0)),
                created=float(r.get(b"created", 0)),
            )
            for name, r in zip(names, records, strict=True)
            if r
        ]

    @staticmethod
    def _call(fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except redis.RedisError as e:
            raise Unavailable(f"the registry (Redis) is unreachable: {e}", retry_after=2) from e
