"""The registry in Redis: its keys, the records it holds, and the reading of them.

Control writes it (`keystone.control.store.Store`, over `RegistryReader`); the proxy and the
router only read it, through `RegistryReader`. Every registry change bumps one version counter,
so a reader can tell in one GET whether anything changed since it last loaded, and a writer
that WATCHes it knows nobody changed anything between its checks and its write.

    keystone:streams            set of stream names
    keystone:stream:<name>      the spec, JSON
    keystone:owners             set of owner names
    keystone:owner:<name>       hash: token_sha256, created
    keystone:token:<sha256>     the owner a token belongs to
    keystone:apps               set of app names
    keystone:app:<name>         hash: key_sha256, rate (events/s, 0 = unlimited), owner, created
    keystone:key:<sha256>       the app a key belongs to
    keystone:retired_streams    hash: deleted streams' names and their owners, kept for good
    keystone:retired_owners     set: removed owners' names, never given again
    keystone:topics             hash: Kafka output topics (in Kafka's collision form) and their
                                owners, kept for good
    keystone:topic_names        hash: the same topics' names as made, kept for good
    keystone:version            incremented on every registry change
    keystone:fronting           the fronting cluster that takes writes, JSON (contracts.fronting
                                .Active); absent: home for every stream
    keystone:fronting_switches  hash: switches counted by '<from>><to>><reason>'
    keystone:fronting_log       stream of the latest switches (contracts.fronting.Switch), capped
    keystone:receivers          hash: the owners' alert receivers by '<owner>/<name>', JSON
                                (contracts.receivers.Receiver)
    keystone:router:<stream>    hash: the fleet's view of the stream's router (RouterState)
    keystone:rewinds:<stream>   hash: per output, its latest rewind (contracts.recovery.Rewind)
    keystone:backfills:<stream> hash: per output, its latest backfill (contracts.recovery.Backfill)
    keystone:redrives           hash: per stream, its latest redrive of dead letters (Redrive)
                                (each an Operation's latest, where `slot` says)
    keystone:restore_points:<stream>:<output>
                                sorted set: the output's restore points by time (RestorePoint)
    keystone:harvested:<stream> hash: per output, the last batch collected ('<generation>:<batch>')
    keystone:audit              stream of changes: who, action, target, owner, detail
    keystone:audit:<owner>      the same entries on what was the owner's, kept per owner
    keystone:session:<sha256>   a web session's token hash, expiring
    keystone:fleet:leader       the control process running the fleet (an expiring lock)
    keystone:quota:<app>        the proxies' shared token bucket of an app with a rate
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any, Self, TypeVar

import redis
from pydantic import TypeAdapter, ValidationError
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry

from keystone.contracts.errors import Conflict, InvalidName, NotFound, Unavailable
from keystone.contracts.fronting import Active, Switch
from keystone.contracts.names import check_stream_name, valid_name
from keystone.contracts.receivers import Receiver
from keystone.contracts.recovery import Backfill, Operation, Redrive, RestorePoint, Rewind
from keystone.contracts.settings import Settings
from keystone.contracts.spec import Principal, StreamSpec

PREFIX = "keystone:"
Op = TypeVar("Op", bound=Operation)
log = logging.getLogger(__name__)


def key(*parts: str) -> str:
    """A registry key: `key("stream", "playback")` is `keystone:stream:playback`."""
    return PREFIX + ":".join(parts)


VERSION = key("version")
# A stream's key for `hash`: random, made with the stream, never shown through the API.
HASHING_KEY_BYTES = 32
AUDIT = key("audit")
# Deleted streams' names and their owners: the topics, tables and indices stay, so the name does.
FRONTING = key("fronting")
FRONTING_SWITCHES = key("fronting_switches")
FRONTING_LOG = key("fronting_log")
RECEIVERS = key("receivers")
FRONTING_LOG_KEPT = 1000  # switches; a dashboard marks those of its window
RETIRED = key("retired_streams")
# Removed owners' names, never given again.
RETIRED_OWNERS = key("retired_owners")
# Kafka output topics and their owners, for the same reason.
TOPICS = key("topics")
# The same topics' names as made (Kafka refuses another whose name differs only in '.'/'_').
TOPIC_NAMES = key("topic_names")
_LABEL = TypeAdapter(Principal)


class Unreadable(Conflict):
    """A stored spec that no longer reads as a spec (written by hand into Redis, or by a version
    with other rules). Readers skip it and name it; only the admin can delete or replace it."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(
            f"the stored spec of stream {name!r} cannot be read ({reason}): the admin may "
            "replace it (PUT) or delete it",
            stream=name,
        )
        self.stream = name
        self.reason = reason


def read_spec(name: str, raw: bytes) -> StreamSpec:
    """A stored spec, or Unreadable naming it: never another error, whatever Redis holds."""
    try:
        spec = StreamSpec.model_validate_json(raw)
    except (ValidationError, ValueError, RecursionError) as e:
        raise Unreadable(name, str(e).splitlines()[0]) from e
    if spec.name != name:
        raise Unreadable(name, f"it names stream {spec.name!r}")
    return spec


@dataclass(frozen=True)
class App:
    name: str
    key_sha256: str
    rate: int  # events per second across all proxies; 0 means no quota
    created: float
    owner: str = ""  # the owner who registered it; "" for the admin's
    kafka: bool = False  # it holds a Kafka credential of its own (`control.kafka_access`)


class RouterPhase(StrEnum):
    """Where a stream's router is in the fleet's life cycle (see `keystone.control.fleet`)."""

    PENDING = "pending"  # wanted, not started yet
    STARTING = "starting"  # its process runs; not every query is up yet
    RUNNING = "running"  # every query is up
    STOPPING = "stopping"  # asked to stop (its spec changed, or its stream went)
    RESTARTING = "restarting"  # it died; started again after a backoff
    FAILED = "failed"  # it died again and again; still retried, slowly
    NONE = "none"  # no router is wanted: the stream has no outputs (never stored)


@dataclass
class RouterState:
    """What the fleet knows of one stream's router; written by the fleet, read by the API and,
    for its size, by the router itself (which resizes in place: `router.job.RouterWatch`)."""

    state: RouterPhase = RouterPhase.PENDING
    pid: int = 0
    port: int = 0  # where its metrics are served
    since: float = 0.0  # when it entered this state
    started: float = 0.0  # when the running process started
    restarts: int = 0  # times the fleet started it again after it died
    failures: int = 0  # deaths in a row without a minute of health
    retry_at: float = 0.0
    last_error: str = ""
    fingerprint: str = ""  # of the spec it runs, and its size
    # Its size (`control.sizing`): the events per second it is sized for, how many times its
    # traffic changed that and when last, and the input's rate now and peak of the last hour.
    sized_for: int = 0
    resizes: int = 0
    resized_at: float = 0.0
    rate_per_second: float = 0.0
    peak_per_second: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_hash(cls, raw: dict[bytes, bytes]) -> RouterState:
        """The record as stored, type-checked (ValueError when it is not one): the fleet acts
        on what it reads, and anyone who can write to Redis could have written it."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            data = raw.get(f.name.encode())
            if data is not None:
                values[f.name] = json.loads(data)
        state = _ROUTER_STATE.validate_python(values)
        if state.state is RouterPhase.NONE:
            raise ValueError("'none' is a stream without a router, never a router's record")
        return state

    def to_hash(self) -> dict[str, str]:
        return {k: json.dumps(v) for k, v in asdict(self).items()}


_ROUTER_STATE = TypeAdapter(RouterState)


def hash_key(secret: str) -> str:
    # Keys and tokens are 256 random bits, so a plain SHA-256 cannot be reversed by guessing;
    # slow password hashes are for secrets people choose. Only the hash is ever stored.
    return hashlib.sha256(secret.encode()).hexdigest()


def check_label(name: str, what: str) -> str:
    try:
        return _LABEL.validate_python(name)
    except ValidationError as e:
        raise InvalidName(
            f"{what} name {name!r} is not valid: lower-case letters, digits, '_' and '-', "
            "2 to 63, starting with a letter"
        ) from e


class RegistryReader:
    """The registry as its readers see it. Every method reads; none writes."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client

    @classmethod
    def connect(cls, settings: Settings, timeout: float = 5, retries: int = 3) -> Self:
        """`timeout` bounds each call and `retries` its retries: a loop that reads every
        second wants both small, so that a Redis that does not answer cannot hold it long."""
        return cls(
            redis.Redis.from_url(
                settings.redis_url,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                retry=Retry(ExponentialWithJitterBackoff(), retries),
                **settings.redis_client_kwargs(),
            )
        )

    def close(self) -> None:
        self.redis.close()

    def version(self) -> int:
        return int(self._call(self.redis.get, VERSION) or 0)

    def get_stream(self, name: str) -> StreamSpec:
        raw = self._call(self.redis.get, key("stream", name))
        if raw is None:
            raise NotFound(f"no stream {name!r}")
        return read_spec(name, raw)

    def streams(self) -> list[StreamSpec]:
        """Every stream that reads back; one that does not is skipped and logged by name (see
        `read_streams`), so it cannot stop every reader of the registry."""
        specs, unreadable = self.read_streams()
        for problem in unreadable:
            log.warning("skipping stream %r: %s", problem.stream, problem.reason)
        return specs

    def read_streams(self) -> tuple[list[StreamSpec], list[Unreadable]]:
        """The streams that read back, and those that do not."""
        members = self._call(self.redis.smembers, key("streams"))
        names = sorted(n.decode(errors="replace") for n in members)
        raws = self._call(self.redis.mget, [key("stream", n) for n in names]) if names else []
        specs, unreadable = [], []
        for name, raw in zip(names, raws, strict=True):
            if raw is None:
                continue
            try:
                specs.append(read_spec(name, raw))
            except Unreadable as problem:
                unreadable.append(problem)
        return specs, unreadable

    def hashing_key(self, stream: str) -> bytes | None:
        """The stream's key for `hash` in its outputs (control makes it with the stream;
        None for a stream stored before there were keys, and not changed since: no output of
        it hashes)."""
        raw = self._call(self.redis.get, hashing_key_key(stream))
        return None if raw is None else bytes.fromhex(raw.decode())

    def get_app(self, name: str) -> App:
        found = [a for a in self._apps([name]) if a.name == name]
        if not found:
            raise NotFound(f"no app {name!r}")
        return found[0]

    def apps(self) -> list[App]:
        """Every app whose record reads (one that does not is skipped and logged)."""
        members = self._call(self.redis.smembers, key("apps"))
        return self._apps(sorted(n.decode(errors="replace") for n in members))

    def _apps(self, names: list[str]) -> list[App]:
        with self.redis.pipeline(transaction=False) as batch:
            for name in names:
                batch.hgetall(key("app", name))
            records = self._call(batch.execute)
        apps = []
        for name, record in zip(names, records, strict=True):
            if not record:
                continue
            try:
                apps.append(
                    App(
                        name=check_label(name, "app"),
                        key_sha256=record[b"key_sha256"].decode(),
                        rate=int(record.get(b"rate", 0)),
                        created=float(record.get(b"created", 0)),
                        owner=record.get(b"owner", b"").decode(),
                        kafka=record.get(b"kafka", b"0") == b"1",
                    )
                )
            except (KeyError, ValueError, UnicodeDecodeError) as e:  # skipped, not fatal
                log.warning("skipping app record %r: %r", name, e)
        return apps

    def fronting(self, settings: Settings) -> Active:
        """Which fronting cluster takes each stream's writes: as control last switched, else
        home. A record that does not read, or that names clusters the settings no longer
        have, leaves those to home (said in the log): writes go somewhere that exists."""
        home = settings.fronting_clusters[0]
        raw = self._call(self.redis.get, FRONTING)
        if raw is None:
            return Active(cluster=home)
        try:
            active = Active.model_validate_json(raw)
        except ValidationError as e:
            log.error("the fronting record does not read (home takes writes): %s", e)
            return Active(cluster=home)
        return active.within(settings.fronting_clusters)

    def receivers(self, owner: str | None = None) -> list[Receiver]:
        """Every owner's alert receivers (or one owner's), by owner and name; one that does
        not read is left out (said in the log)."""
        found = []
        for field_name, raw in sorted(self._call(self.redis.hgetall, RECEIVERS).items()):
            name = field_name.decode(errors="replace")
            try:
                receiver = Receiver.model_validate_json(raw)
            except ValidationError as e:
                log.error("receiver %r does not read (left out): %s", name, e)
                continue
            if receiver.field != name:  # one owner's field naming another's receiver
                log.error("receiver %r holds %r's (left out)", name, receiver.field)
                continue
            if owner is None or receiver.owner == owner:
                found.append(receiver)
        return found

    def fronting_log(self, since: float) -> list[Switch]:
        """The switches made since `since` (epoch s), oldest first; an entry that does not read
        is left out (said in the log)."""
        entries = self._call(self.redis.xrange, FRONTING_LOG, min=f"{int(since * 1000)}-0")
        found = []
        for entry_id, values in entries:
            try:
                found.append(Switch.model_validate_json(values[b"switch"]))
            except (KeyError, ValidationError) as e:
                log.error("fronting log entry %r does not read: %s", entry_id, e)
        return found

    def fronting_switches(self) -> dict[tuple[str, str, str], int]:
        """Switches so far by (from, to, reason)."""
        raw = self._call(self.redis.hgetall, FRONTING_SWITCHES)
        found = {}
        for field_, count in raw.items():
            parts = field_.decode(errors="replace").split(">")
            if len(parts) == 3:
                found[(parts[0], parts[1], parts[2])] = int(count)
        return found

    # The fleet's view of each router (not part of the registry's version).

    def router_state(self, stream: str) -> RouterState | None:
        raw = self._call(self.redis.hgetall, key("router", check_stream_name(stream)))
        return _router_state(stream, raw)

    def router_states(self) -> dict[str, RouterState]:
        """Each stream's router record. A key is a name read from Redis, which anyone who can
        write there could have made: only valid stream names come back (the fleet makes paths
        of them), and a record that does not read is skipped and logged."""
        found = self._call(lambda: list(self.redis.scan_iter(match=key("router", "*"))))
        streams = []
        for raw_key in found:
            name = raw_key.decode(errors="replace").removeprefix(key("router", ""))
            if valid_name(name, check_stream_name):
                streams.append(name)
            else:
                log.warning("skipping router record %r: not a stream's name", name)
        with self.redis.pipeline(transaction=False) as batch:
            for name in streams:
                batch.hgetall(key("router", name))
            raws = self._call(batch.execute)
        states = {name: _router_state(name, raw) for name, raw in zip(streams, raws, strict=True)}
        return {name: state for name, state in states.items() if state is not None}

    # Recovery (not part of the registry's version either).

    def operations(
        self, kind: type[Op], stream: str, via: redis.Redis | None = None
    ) -> dict[str, Op]:
        """The stream's latest operations of a kind, by output (a kind of the stream's, such as
        a redrive: by the stream's name); a record that does not read is skipped and logged.
        `via`: a transaction's pipeline, watching, to read them in (else the connection)."""
        return self.read_operations(kind, stream, via)[0]

    def read_operations(
        self, kind: type[Op], stream: str, via: redis.Redis | None = None
    ) -> tuple[dict[str, Op], set[str]]:
        """The same, and where a record is that does not read (logged)."""
        client = via if via is not None else self.redis
        if kind.per_output:
            raw = self._call(client.hgetall, operations_key(kind, stream))
        else:
            one = self._call(client.hget, *slot(kind, stream, None))
            raw = {} if one is None else {stream.encode(): one}
        found: dict[str, Op] = {}
        unreadable: set[str] = set()
        for field_name, data in raw.items():
            where = field_name.decode(errors="replace")
            if kind.per_output and not valid_name(where):
                log.warning(
                    "skipping a %s record of %s: %r is no output's name", kind.noun(), stream, where
                )
                continue
            try:
                record = kind.model_validate_json(data)
            except ValidationError as e:
                log.warning(
                    "the %s record of %s (%s) does not read: %s", kind.noun(), stream, where, e
                )
                unreadable.add(where)
                continue
            if kind.per_output and getattr(record, "output", None) != where:
                unreadable.add(where)
            else:
                found[where] = record
        return found, unreadable

    def rewinds(self, stream: str) -> dict[str, Rewind]:
        """Each output's latest rewind."""
        return self.operations(Rewind, stream)

    def read_rewinds(self, stream: str) -> tuple[dict[str, Rewind], set[str]]:
        """Each output's latest rewind, and the outputs whose record does not read: the router
        holds those."""
        return self.read_operations(Rewind, stream)

    def backfills(self, stream: str) -> dict[str, Backfill]:
        """Each output's latest backfill."""
        return self.operations(Backfill, stream)

    def redrive(self, stream: str) -> Redrive | None:
        """The stream's latest redrive."""
        return self.operations(Redrive, stream).get(stream)

    def restore_points(self, stream: str, output: str) -> list[RestorePoint]:
        """The output's restore points, newest first."""
        raw = self._call(self.redis.zrevrange, restore_points_key(stream, output), 0, -1)
        points = []
        for data in raw:
            try:
                points.append(RestorePoint.model_validate_json(data))
            except ValidationError:
                log.warning("skipping a restore point of %s.%s", stream, output)
        return points

    @staticmethod
    def _call(fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except redis.WatchError:
            raise
        except redis.RedisError as e:
            raise Unavailable(f"the registry (Redis) is unreachable: {e}", retry_after=2) from e


def hashing_key_key(stream: str) -> str:
    return key("hashing_key", stream)


def slot(kind: type[Operation], stream: str, output: str | None) -> tuple[str, str]:
    """Where the registry keeps the latest operation of a kind: a hash and its field (the
    output's, or for a kind of the stream's, the stream's name)."""
    if kind.per_output:
        assert output is not None, f"a {kind.noun()} is an output's"
        return operations_key(kind, stream), output
    return operations_key(kind, stream), check_stream_name(stream)


def operations_key(kind: type[Operation], stream: str) -> str:
    """The hash of a stream's latest operations of a kind (of every stream's, for a kind of
    the stream's)."""
    check_stream_name(stream)
    return key(kind.kind, stream) if kind.per_output else key(kind.kind)


def restore_points_key(stream: str, output: str) -> str:
    return key("restore_points", check_stream_name(stream), output)


def _router_state(stream: str, raw: dict[bytes, bytes]) -> RouterState | None:
    if not raw:
        return None
    try:
        return RouterState.from_hash(raw)
    except (ValueError, TypeError) as e:
        log.warning("skipping router record of %r: %s", stream, e)
        return None
