"""Who may do what: owners (who may change their streams, by a bearer token) and apps (which
may post events, by a key). Each is a record with one hashed secret, its hash the way back to
it; the secret itself is shown once, when it is made."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

import redis

from keystone.contracts.errors import Conflict, NotFound
from keystone.contracts.registry import (
    RETIRED_OWNERS,
    App,
    check_label,
    hash_key,
    key,
)
from keystone.contracts.spec import StreamSpec
from keystone.control.store.base import Repository, owner_audit
from keystone.control.store.specs import stored_form


class Principals(Repository):
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
            streams = sorted(s.name for s in self.reader.streams() if s.owner == name)
            apps = sorted(a.name for a in self.reader.apps() if a.owner == name)
            receivers = [f"receiver {r.name}" for r in self.reader.receivers(name)]
            if streams or apps or receivers:
                owned = ", ".join(streams + apps + receivers)
                raise Conflict(f"owner {name!r} still owns {owned}: delete those first")

        self._delete_principal(
            "owner",
            "token",
            name,
            audit,
            forget=(owner_audit(name),),
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
            None if check is None else lambda: check(self.reader.apps()),
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
                for spec in self.reader.streams()
                if name in spec.producers
            ]

        self._delete_principal("app", "key", name, audit, leave_streams, owner)

    def set_app_kafka(
        self, name: str, holds: bool, audit: dict[str, Any], owner: str | None = None
    ) -> None:
        """Records whether the app holds a Kafka credential (`control.kafka_access`); with
        `owner`, only if the app is theirs when it changes (else 404, as for no app)."""

        def write(tx: redis.client.Pipeline) -> None:
            self._digest(tx, "app", "key", name, owner)
            tx.multi()
            tx.hset(key("app", name), "kafka", "1" if holds else "0")

        self.tx.versioned(write, audit)

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

        self.tx.versioned(write, audit)
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

        self.tx.versioned(write, audit)
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

        self.tx.versioned(write, audit)

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
