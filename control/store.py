"""The registry in Redis: stream specs, owners, producing apps and their (hashed) keys, the
fleet's view of each router, and the audit log.

Control owns it; the proxy and the router read it. Every registry change bumps one version
counter, so a reader can tell in one GET whether anything changed since it last loaded, and a
writer that WATCHes it knows nobody changed anything between its checks and its write.

    keystone:streams            set of stream names
    keystone:stream:<name>      the spec, JSON
    keystone:owners             set of owner names
    keystone:owner:<name>       hash: token_sha256, created
    keystone:token:<sha256>     the owner a token belongs to
    keystone:apps               set of app names
    keystone:app:<name>         hash: key_sha256, rate (events/s, 0 = unlimited), owner, created
    keystone:key:<sha256>       the app a key belongs to
    keystone:retired_streams    hash: deleted streams' names and their owners, kept for good
    keystone:topics             hash: Kafka output topics (in Kafka's collision form) and their
                                owners, kept for good
    keystone:version            incremented on every registry change
    keystone:router:<stream>    hash: the fleet's view of the stream's router (RouterState)
    keystone:audit              stream of changes: who, action, target, detail
    keystone:fleet:leader       the control process running the fleet (an expiring lock)
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import redis
from pydantic import TypeAdapter, ValidationError

from contracts.errors import Conflict, InvalidName, NotFound, Unavailable
from contracts.names import topic_key
from contracts.settings import Settings
from contracts.spec import Principal, StreamSpec

PREFIX = "keystone:"
VERSION = f"{PREFIX}version"
AUDIT = f"{PREFIX}audit"
# Deleted streams' names and their owners: the topics, tables and indices stay, so the name does.
RETIRED = f"{PREFIX}retired_streams"
# Kafka output topics and their owners, for the same reason.
TOPICS = f"{PREFIX}topics"
AUDIT_KEPT = 100_000  # entries; older ones are trimmed
_LABEL = TypeAdapter(Principal)


@dataclass(frozen=True)
class App:
    name: str
    key_sha256: str
    rate: int  # events per second across all proxies; 0 means no quota
    created: float
    owner: str = ""  # the owner who registered it; "" for the admin's


@dataclass(frozen=True)
class AuditEntry:
    id: str
    at: float
    who: str
    action: str
    target: str
    detail: dict[str, Any]


@dataclass
class RouterState:
    """What the fleet knows of one stream's router; written by the fleet, read by the API."""

    state: str = "pending"  # pending | starting | running | stopping | restarting | failed
    pid: int = 0
    port: int = 0  # where its metrics are served
    since: float = 0.0  # when it entered this state
    started: float = 0.0  # when the running process started
    restarts: int = 0  # times the fleet started it again after it died
    failures: int = 0  # deaths in a row without a minute of health
    retry_at: float = 0.0
    last_error: str = ""
    fingerprint: str = ""  # of the spec it runs
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_hash(cls, raw: dict[bytes, bytes]) -> RouterState:
        values: dict[str, Any] = {}
        for f in fields(cls):
            data = raw.get(f.name.encode())
            if data is not None:
                values[f.name] = json.loads(data)
        return cls(**values)

    def to_hash(self) -> dict[str, str]:
        return {k: json.dumps(v) for k, v in asdict(self).items()}


def hash_key(key: str) -> str:
    # Keys and tokens are 256 random bits, so a plain SHA-256 cannot be reversed by guessing;
    # slow password hashes are for secrets people choose. Only the hash is ever stored.
    return hashlib.sha256(key.encode()).hexdigest()


def check_label(name: str, what: str) -> str:
    try:
        return _LABEL.validate_python(name)
    except ValidationError as e:
        raise InvalidName(
            f"{what} name {name!r} is not valid: lower-case letters, digits, '_' and '-', "
            "2 to 63, starting with a letter"
        ) from e


Change = Callable[[StreamSpec | None], StreamSpec | None]


class Store:
    def __init__(self, client: redis.Redis) -> None:
        self.redis = client

    @classmethod
    def connect(cls, settings: Settings) -> Store:
        return cls(redis.Redis.from_url(settings.redis_url, socket_timeout=5))

    def close(self) -> None:
        self.redis.close()

    def version(self) -> int:
        return int(self._call(self.redis.get, VERSION) or 0)

    # Streams

    def put_stream(self, spec: StreamSpec) -> None:
        """Stores a spec as is (tools and tests; control goes through `change_stream`)."""
        self.change_stream(spec.name, lambda _: spec)

    def change_stream(
        self, name: str, change: Change, audit: dict[str, Any] | None = None
    ) -> tuple[StreamSpec | None, StreamSpec | None]:
        """Applies `change` (old spec or None -> new spec or None to delete) atomically against
        every other registry write: if anything changes meanwhile, it runs again on the new
        state. `change` validates and may raise. The audit entry is written in the same step.
        A deleted stream's name stays its owner's: another owner's stream of that name would
        read (and write) the data its topics, tables and indices keep. So does a Kafka output's
        topic, from the first spec stored that writes to it (`change` checks the claims)."""

        def write(tx: redis.client.Pipeline) -> tuple[StreamSpec | None, StreamSpec | None]:
            raw = tx.get(f"{PREFIX}stream:{name}")
            old = StreamSpec.model_validate_json(raw) if raw is not None else None
            new = change(old)
            if old is None and new is not None:
                retired = tx.hget(RETIRED, name)
                if retired is not None and retired.decode() != new.owner:
                    raise Conflict(
                        f"stream name {name!r} was another owner's: their deleted stream's "
                        "topics, tables and indices keep its data, so choose another name"
                    )
            tx.multi()
            if new is None:
                tx.delete(f"{PREFIX}stream:{name}")
                tx.srem(f"{PREFIX}streams", name)
                if old is not None:
                    tx.hset(RETIRED, name, old.owner)
            else:
                tx.set(f"{PREFIX}stream:{name}", new.to_json())
                tx.sadd(f"{PREFIX}streams", name)
                for topic in new.kafka_topics().values():
                    tx.hsetnx(TOPICS, topic_key(topic), new.owner)
            return old, new

        return self._transact(write, audit)

    def retired_streams(self) -> dict[str, str]:
        """Deleted streams' names and their owners."""
        retired = self._call(self.redis.hgetall, RETIRED)
        return {k.decode(): v.decode() for k, v in retired.items()}

    def topic_owners(self) -> dict[str, str]:
        """Kafka output topics (in Kafka's collision form) and their owners."""
        claims = self._call(self.redis.hgetall, TOPICS)
        return {k.decode(): v.decode() for k, v in claims.items()}

    def get_stream(self, name: str) -> StreamSpec:
        raw = self._call(self.redis.get, f"{PREFIX}stream:{name}")
        if raw is None:
            raise NotFound(f"no stream {name!r}")
        return StreamSpec.model_validate_json(raw)

    def streams(self) -> list[StreamSpec]:
        names = sorted(n.decode() for n in self._call(self.redis.smembers, f"{PREFIX}streams"))
        raws = self._call(self.redis.mget, [f"{PREFIX}stream:{n}" for n in names]) if names else []
        return [StreamSpec.model_validate_json(r) for r in raws if r is not None]

    # Owners: who may change which streams, each with a bearer token.

    def create_owner(self, name: str, audit: dict[str, Any]) -> str:
        """Registers an owner and returns their token: shown once, stored only hashed."""
        return self._create("owner", "token", "ko", name, {}, audit)

    def rotate_owner(self, name: str, audit: dict[str, Any]) -> str:
        """A new token for the owner; the old one stops working at once."""
        return self._replace_secret("owner", "token", "ko", name, audit)

    def delete_owner(self, name: str, audit: dict[str, Any]) -> None:
        self._delete_principal("owner", "token", name, audit)

    def owners(self) -> list[str]:
        return sorted(n.decode() for n in self._call(self.redis.smembers, f"{PREFIX}owners"))

    def owner_by_token(self, token: str) -> str | None:
        name = self._call(self.redis.get, f"{PREFIX}token:{hash_key(token)}")
        return name.decode() if name is not None else None

    # Apps

    def create_app(
        self, name: str, rate: int = 0, owner: str = "", audit: dict | None = None
    ) -> str:
        """Registers a producing app and returns its key: shown once, stored only hashed."""
        return self._create("app", "key", "ks", name, {"rate": rate, "owner": owner}, audit)

    def rotate_app(self, name: str, audit: dict[str, Any]) -> str:
        """A new key for the app; the old one stops working within the proxy's refresh."""
        return self._replace_secret("app", "key", "ks", name, audit)

    def delete_app(self, name: str, audit: dict[str, Any]) -> None:
        """Revokes the app: its key stops working and it leaves every stream's producers, so a
        later app of the same name inherits no grants."""

        def leave_streams(tx: redis.client.Pipeline) -> list[StreamSpec]:
            return [
                spec.model_copy(update={"producers": [p for p in spec.producers if p != name]})
                for spec in self.streams()
                if name in spec.producers
            ]

        self._delete_principal("app", "key", name, audit, leave_streams)

    def get_app(self, name: str) -> App:
        found = [a for a in self._apps([name]) if a.name == name]
        if not found:
            raise NotFound(f"no app {name!r}")
        return found[0]

    def apps(self) -> list[App]:
        return self._apps(
            sorted(n.decode() for n in self._call(self.redis.smembers, f"{PREFIX}apps"))
        )

    def _apps(self, names: list[str]) -> list[App]:
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
                owner=r.get(b"owner", b"").decode(),
            )
            for name, r in zip(names, records, strict=True)
            if r
        ]

    # Owners and apps alike: a record with one hashed secret, its hash the way back to it.

    def _create(
        self,
        kind: str,
        secret: str,
        prefix: str,
        name: str,
        fields: dict[str, Any],
        audit: dict[str, Any] | None,
    ) -> str:
        check_label(name, kind)
        value = f"{prefix}_{secrets.token_urlsafe(32)}"
        digest = hash_key(value)
        # Create only if absent, atomically: two concurrent creates cannot both win.
        if not self._call(self.redis.hsetnx, f"{PREFIX}{kind}:{name}", f"{secret}_sha256", digest):
            raise Conflict(f"{kind} {name!r} already exists")

        def write(tx: redis.client.Pipeline) -> None:
            tx.multi()
            record = {f"{secret}_sha256": digest, "created": time.time(), **fields}
            tx.hset(f"{PREFIX}{kind}:{name}", mapping=record)
            tx.set(f"{PREFIX}{secret}:{digest}", name)
            tx.sadd(f"{PREFIX}{kind}s", name)

        self._transact(write, audit)
        return value

    def _replace_secret(
        self, kind: str, secret: str, prefix: str, name: str, audit: dict[str, Any]
    ) -> str:
        value = f"{prefix}_{secrets.token_urlsafe(32)}"
        digest = hash_key(value)

        def write(tx: redis.client.Pipeline) -> None:
            old = self._digest(tx, kind, secret, name)
            tx.multi()
            tx.delete(f"{PREFIX}{secret}:{old}")
            tx.hset(f"{PREFIX}{kind}:{name}", f"{secret}_sha256", digest)
            tx.set(f"{PREFIX}{secret}:{digest}", name)

        self._transact(write, audit)
        return value

    def _delete_principal(
        self,
        kind: str,
        secret: str,
        name: str,
        audit: dict[str, Any],
        also: Callable[[redis.client.Pipeline], list[StreamSpec]] | None = None,
    ) -> None:
        def write(tx: redis.client.Pipeline) -> None:
            old = self._digest(tx, kind, secret, name)
            changed = also(tx) if also else []
            tx.multi()
            tx.delete(f"{PREFIX}{secret}:{old}", f"{PREFIX}{kind}:{name}")
            tx.srem(f"{PREFIX}{kind}s", name)
            for spec in changed:
                tx.set(f"{PREFIX}stream:{spec.name}", spec.to_json())

        self._transact(write, audit)

    @staticmethod
    def _digest(tx: redis.client.Pipeline, kind: str, secret: str, name: str) -> str:
        """The stored hash of an owner's token or an app's key (read inside a transaction)."""
        digest = tx.hget(f"{PREFIX}{kind}:{name}", f"{secret}_sha256")
        if digest is None:
            raise NotFound(f"no {kind} {name!r}")
        return digest.decode()

    # The fleet's view of each router (not part of the registry's version).

    def router_state(self, stream: str) -> RouterState | None:
        raw = self._call(self.redis.hgetall, f"{PREFIX}router:{stream}")
        return RouterState.from_hash(raw) if raw else None

    def router_states(self) -> dict[str, RouterState]:
        found = self._call(lambda: list(self.redis.scan_iter(match=f"{PREFIX}router:*")))
        keys = [k.decode() for k in found]
        with self.redis.pipeline(transaction=False) as batch:
            for key in keys:
                batch.hgetall(key)
            raws = self._call(batch.execute)
        return {
            k.removeprefix(f"{PREFIX}router:"): RouterState.from_hash(r)
            for k, r in zip(keys, raws, strict=True)
            if r
        }

    def put_router_state(self, stream: str, state: RouterState) -> None:
        self._call(self.redis.hset, f"{PREFIX}router:{stream}", mapping=state.to_hash())

    def delete_router_state(self, stream: str) -> None:
        self._call(self.redis.delete, f"{PREFIX}router:{stream}")

    def hold_lease(self, name: str, holder: str, seconds: float) -> bool:
        """Takes or renews an expiring lock; True while `holder` has it."""
        key = f"{PREFIX}{name}"
        ms = int(seconds * 1000)
        if self._call(self.redis.set, key, holder, nx=True, px=ms):
            return True
        # Renew only our own lease, atomically.
        renewed = self._call(
            self.redis.eval,
            "if redis.call('get', KEYS[1]) == ARGV[1] then "
            "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end",
            1,
            key,
            holder,
            ms,
        )
        return bool(renewed)

    def release_lease(self, name: str, holder: str) -> None:
        self._call(
            self.redis.eval,
            "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
            "else return 0 end",
            1,
            f"{PREFIX}{name}",
            holder,
        )

    # The audit log: who changed what, when.

    def audit_log(self, limit: int = 100) -> list[AuditEntry]:
        """The newest entries first."""
        entries = self._call(self.redis.xrevrange, AUDIT, count=limit)
        return [_entry(entry_id, values) for entry_id, values in entries]

    # Writes

    def _transact(self, write: Callable[[redis.client.Pipeline], Any], audit: dict | None) -> Any:
        """Runs `write` (reads, then `multi()`, then queued writes) with the version WATCHed,
        again from the start if any registry write happened meanwhile; bumps the version and
        appends the audit entry in the same transaction."""
        with self.redis.pipeline() as tx:
            while True:
                try:
                    self._call(tx.watch, VERSION)
                    result = write(tx)
                    tx.incr(VERSION)
                    if audit is not None:
                        tx.xadd(AUDIT, _audit_fields(audit), maxlen=AUDIT_KEPT, approximate=True)
                    self._call(tx.execute)
                    return result
                except redis.WatchError:
                    continue
                finally:
                    tx.reset()

    @staticmethod
    def _call(fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except redis.WatchError:
            raise
        except redis.RedisError as e:
            raise Unavailable(f"the registry (Redis) is unreachable: {e}", retry_after=2) from e


def audit(who: str, action: str, target: str, **detail: Any) -> dict[str, Any]:
    """An audit entry for a `Store` write."""
    return {"who": who, "action": action, "target": target, "detail": detail}


def _audit_fields(entry: dict[str, Any]) -> dict[str, str]:
    return {
        "at": repr(time.time()),
        "who": entry["who"],
        "action": entry["action"],
        "target": entry["target"],
        "detail": json.dumps(entry["detail"], default=str),
    }


def _entry(entry_id: bytes, values: dict[bytes, bytes]) -> AuditEntry:
    text = {k.decode(): v.decode() for k, v in values.items()}
    return AuditEntry(
        id=entry_id.decode(),
        at=float(text["at"]),
        who=text["who"],
        action=text["action"],
        target=text["target"],
        detail=json.loads(text["detail"]),
    )
