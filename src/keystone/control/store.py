"""The registry's writes: streams, owners, apps and their hashed secrets, the fleet's router
records, leases, web sessions and the audit log, each in one WATCHed transaction. Its keys and
its reading are `keystone.contracts.registry`'s."""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import redis
from pydantic import ValidationError

from keystone.contracts.errors import Conflict, InvalidName, InvalidSpec, NotFound
from keystone.contracts.names import check_stream_name, topic_key, valid_name
from keystone.contracts.recovery import Backfill, Redrive, RestorePoint, Rewind
from keystone.contracts.registry import (
    AUDIT,
    HASHING_KEY_BYTES,
    REDRIVES,
    RETIRED,
    RETIRED_OWNERS,
    TOPIC_NAMES,
    TOPICS,
    VERSION,
    App,
    RegistryReader,
    RouterState,
    Unreadable,
    check_label,
    hash_key,
    hashing_key_key,
    key,
    read_spec,
    restore_points_key,
)
from keystone.contracts.spec import OutputSpec, StreamSpec, field_errors

AUDIT_KEPT = 100_000  # entries; older ones are trimmed
# Each owner's own copy of the entries on what is theirs: another tenant's changes, however
# many, never push an owner's history out of their view.
AUDIT_KEPT_PER_OWNER = 10_000
log = logging.getLogger(__name__)


def stored_form(spec: StreamSpec) -> str:
    """The JSON to store for a spec, once it is proven to read back as the very same spec: what
    is validated is exactly what every reader will later read."""
    raw = spec.to_json()
    try:
        again = StreamSpec.model_validate_json(raw)
    except ValidationError as e:
        raise InvalidSpec(
            "the stream spec does not read back as it was given", problems=field_errors(e)
        ) from e
    if again.to_json() != raw:
        raise InvalidSpec("the stream spec does not read back as it was given")
    return raw


@dataclass(frozen=True)
class AuditEntry:
    id: str
    at: float
    who: str
    action: str
    target: str
    detail: dict[str, Any]
    owner: str = ""  # whose the target was when it changed ("" in entries older than this)


Change = Callable[[StreamSpec | None], StreamSpec | None]


class Store(RegistryReader):
    # Streams

    def put_stream(self, spec: StreamSpec) -> None:
        """Stores a spec as is (tools and tests; control goes through `change_stream`)."""
        self.change_stream(spec.name, lambda _: spec)

    def change_stream(
        self,
        name: str,
        change: Change,
        audit: dict[str, Any] | None = None,
        replace_unreadable: bool = False,
    ) -> tuple[StreamSpec | None, StreamSpec | None]:
        """Applies `change` (old spec or None -> new spec or None to delete) atomically against
        every other registry write: if anything changes meanwhile, it runs again on the new
        state. `change` validates and may raise. The audit entry is written in the same step.
        A deleted stream's name stays its owner's: another owner's stream of that name would
        read (and write) the data its topics, tables and indices keep. So does a Kafka output's
        topic, from the first spec stored that writes to it (`change` checks the claims).
        A stored spec that does not read back is `Unreadable`, or with `replace_unreadable`
        (the admin's) taken as none."""

        def write(tx: redis.client.Pipeline) -> tuple[StreamSpec | None, StreamSpec | None]:
            raw = tx.get(key("stream", name))
            try:
                old = None if raw is None else read_spec(name, raw)
            except Unreadable:
                if not replace_unreadable:
                    raise
                old = None
            new = change(old)
            stored = None if new is None else stored_form(new)
            if new is not None:  # checked here, not before: an app may go meanwhile
                for app in new.producers:
                    if not tx.exists(key("app", app)):
                        raise NotFound(f"no app {app!r}")
            if old is None and new is not None:
                retired = tx.hget(RETIRED, name)
                if retired is not None and retired.decode(errors="replace") != new.owner:
                    # Their deleted stream's topics, tables and indices keep its data. Said as
                    # for a live stream of that name: whose it was is theirs to know.
                    raise Conflict(f"stream {name!r} already exists")
            tx.multi()
            if new is None:
                # Its key goes with it: what its outputs hashed can no longer be matched to
                # values (a stream made again under its name hashes with a new one).
                tx.delete(key("stream", name), hashing_key_key(name))
                tx.srem(key("streams"), name)
                if old is not None:
                    tx.hset(RETIRED, name, old.owner)
            else:
                tx.set(key("stream", name), stored)
                tx.setnx(hashing_key_key(name), secrets.token_hex(HASHING_KEY_BYTES))
                tx.sadd(key("streams"), name)
                for topic in new.kafka_topics().values():
                    tx.hsetnx(TOPICS, topic_key(topic), new.owner)
                    tx.hsetnx(TOPIC_NAMES, topic_key(topic), topic)
            return old, new

        return self._transact(write, audit)

    def ensure_hashing_key(self, stream: str) -> bytes:
        """The stream's key for `hash`, made now if it has none yet (a stream stored before
        there were keys): the preview of a draft that hashes needs the key the output will get
        when it is stored. Made only while the stream exists (a key made as the stream is
        deleted would be a later stream's of that name)."""
        name = hashing_key_key(stream)
        with self.redis.pipeline() as tx:
            while True:
                try:
                    self._call(tx.watch, key("stream", stream), name)
                    current = tx.get(name)
                    if current is not None:
                        return bytes.fromhex(current.decode())
                    if not tx.exists(key("stream", stream)):
                        raise NotFound(f"no stream {stream!r}")
                    made = secrets.token_hex(HASHING_KEY_BYTES)
                    tx.multi()
                    tx.set(name, made)
                    self._call(tx.execute)
                    return bytes.fromhex(made)
                except redis.WatchError:
                    continue
                finally:
                    tx.reset()

    def purge_unreadable(self, name: str, audit: dict[str, Any], fallback_owner: str) -> None:
        """Deletes a stored spec that does not read back (the admin's way out); its name stays
        retired (its topics keep their data) to the owner it names, else to `fallback_owner`."""

        def purge(tx: redis.client.Pipeline) -> None:
            raw = tx.get(key("stream", name))
            if raw is None:
                raise NotFound(f"no stream {name!r}")
            try:
                read_spec(name, raw)
            except Unreadable:
                owner = _claimed_owner(raw) or fallback_owner
            else:
                raise Conflict(f"stream {name!r} reads back: delete it as any stream")
            tx.multi()
            tx.delete(key("stream", name), hashing_key_key(name))
            tx.srem(key("streams"), name)
            tx.hsetnx(RETIRED, name, owner)  # a name retired before stays whose it was

        self._transact(purge, audit)

    def retired_streams(self) -> dict[str, str]:
        """Deleted streams' names and their owners (an entry that is no stream's name is
        skipped: it was not written here)."""
        retired = self._call(self.redis.hgetall, RETIRED)
        names = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in retired.items()}
        return {name: owner for name, owner in names.items() if valid_name(name, check_stream_name)}

    def topic_owners(self) -> dict[str, str]:
        """Kafka output topics (in Kafka's collision form) and their owners."""
        claims = self._call(self.redis.hgetall, TOPICS)
        return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in claims.items()}

    def topic_names(self) -> dict[str, str]:
        """Kafka output topics (in Kafka's collision form) and their names as made."""
        names = self._call(self.redis.hgetall, TOPIC_NAMES)
        return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in names.items()}

    # Owners: who may change which streams, each with a bearer token.

    def create_owner(self, name: str, audit: dict[str, Any]) -> str:
        """Registers an owner and returns their token: shown once, stored only hashed. A
        removed owner's name is never given again: their deleted streams' names, kept for them,
        and their history would go with it."""

        def unused() -> None:
            if self._call(self.redis.sismember, RETIRED_OWNERS, name):
                raise Conflict(f"owner {name!r} was an owner's: choose another name")

        return self._create("owner", "token", "ko", name, {}, audit, unused)

    def rotate_owner(self, name: str, audit: dict[str, Any]) -> str:
        """A new token for the owner; the old one stops working at once."""
        return self._replace_secret("owner", "token", "ko", name, audit)

    def delete_owner(self, name: str, audit: dict[str, Any]) -> None:
        """Removes an owner who owns no stream or app any more, and their view of the audit
        log (the admin's keeps everything); their name is retired for good."""

        def owns_nothing() -> None:
            streams = sorted(s.name for s in self.streams() if s.owner == name)
            apps = sorted(a.name for a in self.apps() if a.owner == name)
            if streams or apps:
                raise Conflict(
                    f"owner {name!r} still owns {', '.join(streams + apps)}: delete those first"
                )

        self._delete_principal(
            "owner",
            "token",
            name,
            audit,
            forget=(_owner_audit(name),),
            check=owns_nothing,
            retire=RETIRED_OWNERS,
        )

    def owners(self) -> list[str]:
        return sorted(n.decode() for n in self._call(self.redis.smembers, key("owners")))

    def owner_by_digest(self, token_sha256: str) -> str | None:
        name = self._call(self.redis.get, key("token", token_sha256))
        return name.decode() if name is not None else None

    # Apps

    def create_app(
        self,
        name: str,
        rate: int = 0,
        owner: str = "",
        audit: dict | None = None,
        check: Callable[[list[App]], None] | None = None,
    ) -> str:
        """Registers a producing app and returns its key: shown once, stored only hashed.
        `check` sees every app as the write commits (a limit per owner)."""
        return self._create(
            "app",
            "key",
            "ks",
            name,
            {"rate": rate, "owner": owner},
            audit,
            None if check is None else lambda: check(self.apps()),
        )

    def rotate_app(self, name: str, audit: dict[str, Any], owner: str | None = None) -> str:
        """A new key for the app; the old one stops working within the proxy's refresh. With
        `owner`, only if the app is theirs when the key changes (else 404, as for no app)."""
        return self._replace_secret("app", "key", "ks", name, audit, owner)

    def delete_app(self, name: str, audit: dict[str, Any], owner: str | None = None) -> None:
        """Revokes the app: its key stops working and it leaves every stream's producers, so a
        later app of the same name inherits no grants."""

        def leave_streams(tx: redis.client.Pipeline) -> list[StreamSpec]:
            return [
                spec.model_copy(update={"producers": [p for p in spec.producers if p != name]})
                for spec in self.streams()
                if name in spec.producers
            ]

        self._delete_principal("app", "key", name, audit, leave_streams, owner)

    # Owners and apps alike: a record with one hashed secret, its hash the way back to it.

    def _create(
        self,
        kind: str,
        secret: str,
        prefix: str,
        name: str,
        fields: dict[str, Any],
        audit: dict[str, Any] | None,
        check: Callable[[], None] | None = None,
    ) -> str:
        """A new record and its secret, in one transaction with `check` (a limit, say): two
        concurrent creates cannot both win, nor both pass a check only one of them may."""
        check_label(name, kind)
        value = f"{prefix}_{secrets.token_urlsafe(32)}"
        digest = hash_key(value)

        def write(tx: redis.client.Pipeline) -> None:
            if tx.exists(key(kind, name)):
                raise Conflict(f"{kind} {name!r} already exists")
            if check is not None:
                check()
            tx.multi()
            record = {f"{secret}_sha256": digest, "created": time.time(), **fields}
            tx.hset(key(kind, name), mapping=record)
            tx.set(key(secret, digest), name)
            tx.sadd(key(f"{kind}s"), name)

        self._transact(write, audit)
        return value

    def _replace_secret(
        self,
        kind: str,
        secret: str,
        prefix: str,
        name: str,
        audit: dict[str, Any],
        owner: str | None = None,
    ) -> str:
        value = f"{prefix}_{secrets.token_urlsafe(32)}"
        digest = hash_key(value)

        def write(tx: redis.client.Pipeline) -> None:
            old = self._digest(tx, kind, secret, name, owner)
            tx.multi()
            tx.delete(key(secret, old))
            tx.hset(key(kind, name), f"{secret}_sha256", digest)
            tx.set(key(secret, digest), name)

        self._transact(write, audit)
        return value

    def _delete_principal(
        self,
        kind: str,
        secret: str,
        name: str,
        audit: dict[str, Any],
        also: Callable[[redis.client.Pipeline], list[StreamSpec]] | None = None,
        owner: str | None = None,
        forget: tuple[str, ...] = (),
        check: Callable[[], None] | None = None,
        retire: str | None = None,
    ) -> None:
        def write(tx: redis.client.Pipeline) -> None:
            old = self._digest(tx, kind, secret, name, owner)
            if check is not None:
                check()
            changed = also(tx) if also else []
            tx.multi()
            tx.delete(key(secret, old), key(kind, name), *forget)
            tx.srem(key(f"{kind}s"), name)
            if retire is not None:
                tx.sadd(retire, name)
            for spec in changed:
                tx.set(key("stream", spec.name), stored_form(spec))

        self._transact(write, audit)

    @staticmethod
    def _digest(
        tx: redis.client.Pipeline, kind: str, secret: str, name: str, owner: str | None = None
    ) -> str:
        """The stored hash of an owner's token or an app's key, read inside the transaction
        that changes it; with `owner`, only of a record that is theirs then (an app deleted and
        registered again by someone else between a check and a write is not)."""
        digest, holder = tx.hmget(key(kind, name), [f"{secret}_sha256", "owner"])
        if digest is None or (owner is not None and (holder or b"").decode() != owner):
            raise NotFound(f"no {kind} {name!r}")
        return digest.decode()

    # The fleet's view of each router (not part of the registry's version).

    def put_router_state(self, stream: str, state: RouterState) -> None:
        self._call(self.redis.hset, key("router", stream), mapping=state.to_hash())

    def delete_router_state(self, stream: str) -> None:
        self._call(self.redis.delete, key("router", stream), key("traffic", stream))

    def traffic(self, stream: str) -> list[tuple[float, int]]:
        """The fleet's samples of the stream's input, (time, records so far), oldest first; a
        record that does not read is none (sampling starts again)."""
        raw = self._call(self.redis.get, key("traffic", check_stream_name(stream)))
        try:
            samples = json.loads(raw) if raw is not None else []
            return [(float(t), int(n)) for t, n in samples]
        except (ValueError, TypeError):
            log.warning("the traffic samples of %s do not read: sampling again", stream)
            return []

    def put_traffic(self, stream: str, samples: list[tuple[float, int]]) -> None:
        self._call(self.redis.set, key("traffic", check_stream_name(stream)), json.dumps(samples))

    def hold_lease(self, name: str, holder: str, seconds: float) -> bool:
        """Takes or renews an expiring lock; True while `holder` has it."""
        lease = key(name)
        ms = int(seconds * 1000)
        if self._call(self.redis.set, lease, holder, nx=True, px=ms):
            return True
        # Renew only our own lease, atomically.
        renewed = self._call(
            self.redis.eval,
            "if redis.call('get', KEYS[1]) == ARGV[1] then "
            "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end",
            1,
            lease,
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
            key(name),
            holder,
        )

    # Recovery: restore points and rewinds (not part of the registry's version).

    def start_rewind(
        self,
        stream: str,
        rewind: Rewind,
        planned: tuple[OutputSpec, str | None],
        keeps: Callable[[RestorePoint], bool],
        audit: dict[str, Any],
    ) -> None:
        """Records the output's rewind if nothing it was planned on changed: the output as it
        was (`planned[0]`, else 404 or 409) and its latest rewind (`planned[1]`'s id, else 409:
        one rewind per output at a time). The restore points `keeps` refuses go in the same
        step, read as they are then (the fleet may have added some since the plan), with the
        audit entry."""
        rewinds = key("rewinds", stream)
        points = restore_points_key(stream, rewind.output)
        output, latest = planned

        def write(tx: redis.client.Pipeline) -> None:
            tx.watch(rewinds, points, key("backfills", stream))
            raw = tx.get(key("stream", stream))
            now = read_spec(stream, raw).output(rewind.output) if raw is not None else None
            if now is None:
                raise NotFound(f"stream {stream!r} has no output {rewind.output!r}")
            if now != output:
                raise Conflict(f"output {rewind.output!r} changed meanwhile: ask again")
            current = _record_or_none(Rewind, tx.hget(rewinds, rewind.output))
            if current is not None and current.replaying:
                raise Conflict(
                    f"output {rewind.output!r} is replaying rewind {current.id}: one rewind "
                    "per output at a time",
                    rewind=current.id,
                )
            if (current.id if current is not None else None) != latest:
                raise Conflict(f"output {rewind.output!r} was rewound meanwhile: ask again")
            backfill = tx.hget(key("backfills", stream), rewind.output)
            check_not_backfilled(stream, rewind.output, _record_or_none(Backfill, backfill))
            dropped = [m for m in tx.zrange(points, 0, -1) if not _kept(m, keeps)]
            tx.multi()
            tx.hset(rewinds, rewind.output, rewind.model_dump_json())
            if dropped:
                tx.zrem(points, *dropped)

        self._transact(write, audit)

    def finish_rewind(self, stream: str, rewind: Rewind) -> bool:
        """Replaces the output's rewind record with `rewind` (the fleet's: caught up) if it is
        still the same rewind; whether it was."""

        def write(tx: redis.client.Pipeline) -> None:
            tx.hset(key("rewinds", stream), rewind.output, rewind.model_dump_json())

        return self._while_rewind(
            stream, rewind.output, lambda now: now is not None and now.id == rewind.id, write
        )

    def start_backfill(
        self, stream: str, backfill: Backfill, planned: OutputSpec, audit: dict[str, Any]
    ) -> None:
        """Records the output's backfill unless another of it is under way (409) or the output
        changed since it was planned (404 or 409), with the audit entry."""
        backfills = key("backfills", stream)

        def write(tx: redis.client.Pipeline) -> None:
            tx.watch(backfills, key("rewinds", stream))
            raw = tx.get(key("stream", stream))
            now = read_spec(stream, raw).output(backfill.output) if raw is not None else None
            if now is None:
                raise NotFound(f"stream {stream!r} has no output {backfill.output!r}")
            if now != planned:
                raise Conflict(f"output {backfill.output!r} changed meanwhile: ask again")
            current = _record_or_none(Backfill, tx.hget(backfills, backfill.output))
            if current is not None and current.active:
                raise Conflict(
                    f"output {backfill.output!r} is being backfilled ({current.id}): one "
                    "backfill per output at a time; cancel it first",
                    backfill=current.id,
                )
            rewind = tx.hget(key("rewinds", stream), backfill.output)
            check_not_replaying(stream, backfill.output, _record_or_none(Rewind, rewind))
            tx.multi()
            tx.hset(backfills, backfill.output, backfill.model_dump_json())

        self._transact(write, audit)

    def update_backfill(
        self,
        stream: str,
        backfill: Backfill,
        holds: Callable[[Backfill], bool] = lambda _: True,
        audit: dict[str, Any] | None = None,
    ) -> bool:
        """Replaces the output's backfill record with `backfill` if it is still the same
        backfill, `holds` of it as it is, and nobody changes it meanwhile; whether it was (the
        audit entry with it)."""
        return self._update_job(
            key("backfills", stream), backfill.output, backfill, Backfill, holds, audit
        )

    def start_redrive(self, stream: str, redrive: Redrive, audit: dict[str, Any]) -> None:
        """Records the stream's redrive unless another is under way (409), with the audit
        entry."""

        def write(tx: redis.client.Pipeline) -> None:
            tx.watch(REDRIVES)
            current = _record_or_none(Redrive, tx.hget(REDRIVES, stream))
            if current is not None and current.active:
                raise Conflict(
                    f"stream {stream!r} is redriving its dead letters ({current.id}): one "
                    "redrive per stream at a time; cancel it first",
                    redrive=current.id,
                )
            tx.multi()
            tx.hset(REDRIVES, stream, redrive.model_dump_json())

        self._transact(write, audit)

    def update_redrive(
        self,
        stream: str,
        redrive: Redrive,
        holds: Callable[[Redrive], bool] = lambda _: True,
        audit: dict[str, Any] | None = None,
    ) -> bool:
        """As `update_backfill`, for the stream's redrive."""
        return self._update_job(REDRIVES, stream, redrive, Redrive, holds, audit)

    def _update_job(
        self,
        hash_name: str,
        field_name: str,
        record: Any,
        model: type[Backfill] | type[Redrive],
        holds: Callable[[Any], bool],
        audit: dict[str, Any] | None,
    ) -> bool:
        with self.redis.pipeline() as tx:
            try:
                self._call(tx.watch, hash_name)
                current = _record_or_none(model, tx.hget(hash_name, field_name))
                if current is None or current.id != record.id or not holds(current):
                    return False
                tx.multi()
                tx.hset(hash_name, field_name, record.model_dump_json())
                if audit is not None:
                    _append_audit(tx, audit)
                self._call(tx.execute)
                return True
            except redis.WatchError:
                return False
            finally:
                tx.reset()

    def harvested(self, stream: str) -> dict[str, tuple[int, int]]:
        """Per output, the generation and batch of its last restore point collected."""
        raw = self._call(self.redis.hgetall, key("harvested", stream))
        found = {}
        for output, mark in raw.items():
            generation, _, batch = mark.decode(errors="replace").partition(":")
            try:
                found[output.decode(errors="replace")] = (int(generation), int(batch))
            except ValueError:
                log.warning("ignoring the harvest mark %r of %s", mark, stream)
        return found

    def add_restore_points(
        self, stream: str, output: str, points: list[RestorePoint], mark: tuple[int, int]
    ) -> bool:
        """Adds the points of generation `mark[0]` (and marks them collected) if that is still
        the output's generation: points a rewind has just undone are not brought back. Whether
        they were added."""

        def write(tx: redis.client.Pipeline) -> None:
            if points:
                tx.zadd(
                    restore_points_key(stream, output),
                    {p.model_dump_json(): p.time for p in points},
                )
            tx.hset(key("harvested", stream), output, f"{mark[0]}:{mark[1]}")

        def current(now: Rewind | None) -> bool:
            return (now.generation if now is not None else 0) == mark[0]

        return self._while_rewind(stream, output, current, write)

    def _while_rewind(
        self,
        stream: str,
        output: str,
        holds: Callable[[Rewind | None], bool],
        write: Callable[[redis.client.Pipeline], None],
    ) -> bool:
        """Runs `write` in a transaction if the output's rewind record (or its absence) `holds`
        and nobody changes it meanwhile; whether it ran."""
        rewinds = key("rewinds", stream)
        with self.redis.pipeline() as tx:
            try:
                self._call(tx.watch, rewinds)
                if not holds(_record_or_none(Rewind, tx.hget(rewinds, output))):
                    return False
                tx.multi()
                write(tx)
                self._call(tx.execute)
                return True
            except redis.WatchError:
                return False
            finally:
                tx.reset()

    def drop_restore_points(self, stream: str, output: str, points: list[RestorePoint]) -> None:
        if points:
            self._call(
                self.redis.zrem,
                restore_points_key(stream, output),
                *(p.model_dump_json() for p in points),
            )

    def forget_recovery(self, stream: str, output: str | None = None) -> None:
        """The output's (or every output's) restore points, rewind and harvest mark: its
        checkpoints went, so its history did."""
        outputs = (
            [output]
            if output is not None
            else [
                o.decode(errors="replace")
                for o in self._call(self.redis.hkeys, key("harvested", stream))
            ]
            + [
                o.decode(errors="replace")
                for o in self._call(self.redis.hkeys, key("rewinds", stream))
            ]
            + [
                o.decode(errors="replace")
                for o in self._call(self.redis.hkeys, key("backfills", stream))
            ]
        )
        with self.redis.pipeline(transaction=True) as tx:
            for name in set(outputs):
                if valid_name(name):
                    tx.delete(restore_points_key(stream, name))
                tx.hdel(key("harvested", stream), name)
                tx.hdel(key("rewinds", stream), name)
                tx.hdel(key("backfills", stream), name)
            if output is None:
                tx.hdel(REDRIVES, stream)
            self._call(tx.execute)

    # Web sessions: a random id in the browser's cookie, the token's hash here, for a while.

    def open_session(self, token_sha256: str, seconds: int) -> str:
        """A new session for the holder of the token; its id, stored only hashed."""
        session = secrets.token_urlsafe(32)
        self._call(self.redis.set, key("session", hash_key(session)), token_sha256, ex=seconds)
        return session

    def session_token(self, session: str) -> str | None:
        """The hash of the token the session was opened with, while the session lasts."""
        digest = self._call(self.redis.get, key("session", hash_key(session)))
        return digest.decode() if digest is not None else None

    def close_session(self, session: str) -> None:
        self._call(self.redis.delete, key("session", hash_key(session)))

    # The audit log: who changed what, when.

    def audit_log(self, limit: int = 100, owner: str | None = None) -> list[AuditEntry]:
        """The newest entries first: all of them, or those on what was `owner`'s."""
        stream = AUDIT if owner is None else _owner_audit(owner)
        entries = self._call(self.redis.xrevrange, stream, count=limit)
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
                        _append_audit(tx, audit)
                    self._call(tx.execute)
                    return result
                except redis.WatchError:
                    continue
                finally:
                    tx.reset()


R = TypeVar("R", Rewind, Backfill, Redrive)


def check_not_backfilled(stream: str, output: str, backfill: Backfill | None) -> None:
    """409 while the output's backfill is under way: a rewind's replay would write the
    backfilled range again beside what the backfill wrote, or replace a Hive hour the backfill
    is replacing."""
    if backfill is not None and backfill.active:
        raise Conflict(
            f"output {stream}.{output} is being backfilled ({backfill.id}): let it finish, "
            "or cancel it, before rewinding",
            backfill=backfill.id,
        )


def check_not_replaying(stream: str, output: str, rewind: Rewind | None) -> None:
    """409 while the output replays a rewind: a backfill waits until it has caught up."""
    if rewind is not None and rewind.replaying:
        raise Conflict(
            f"output {stream}.{output} is replaying rewind {rewind.id}: a backfill waits "
            "until it has caught up",
            rewind=rewind.id,
        )


def _record_or_none(model: type[R], raw: bytes | None) -> R | None:
    """A stored record (a rewind, a backfill, a redrive), or None when there is none or it does
    not read (a stranger's write: it is replaced)."""
    try:
        return model.model_validate_json(raw) if raw is not None else None
    except ValidationError:
        log.warning("replacing a %s record that does not read", model.__name__.lower())
        return None


def _kept(member: bytes, keeps: Callable[[RestorePoint], bool]) -> bool:
    try:
        return keeps(RestorePoint.model_validate_json(member))
    except ValidationError:
        return False  # a point that does not read is no point to keep


def _owner_audit(owner: str) -> str:
    return key("audit", owner)


def _claimed_owner(raw: bytes | None) -> str:
    """The owner an unreadable spec names, if it names a valid one."""
    try:
        owner = json.loads(raw or b"{}").get("owner")
        return check_label(owner, "owner")
    except (ValueError, AttributeError, RecursionError, InvalidName):
        return ""


def audit(who: str, action: str, target: str, *, owner: str, **detail: Any) -> dict[str, Any]:
    """An audit entry for a `Store` write. `owner` is whose the target is (an owner's name, or
    "admin" for the admin's apps): an owner's view of the log is the entries with theirs."""
    return {"who": who, "action": action, "target": target, "owner": owner, "detail": detail}


def _append_audit(tx: redis.client.Pipeline, audit: dict[str, Any]) -> None:
    """Queues the audit entry in the log and in its owner's."""
    entry = _audit_fields(audit)
    tx.xadd(AUDIT, entry, maxlen=AUDIT_KEPT, approximate=True)
    tx.xadd(_owner_audit(audit["owner"]), entry, maxlen=AUDIT_KEPT_PER_OWNER, approximate=True)


def _audit_fields(entry: dict[str, Any]) -> dict[str, str]:
    return {
        "at": repr(time.time()),
        "who": entry["who"],
        "action": entry["action"],
        "target": entry["target"],
        "owner": entry["owner"],
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
        owner=text.get("owner", ""),
    )
