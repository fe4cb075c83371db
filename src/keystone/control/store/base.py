"""What every repository of the registry shares: its reader (`RegistryReader`, every read) and
the one way it writes (`Transactions`), with the audit entry a write carries."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis

from keystone.contracts.registry import AUDIT, VERSION, RegistryReader, key

AUDIT_KEPT = 100_000  # entries; older ones are trimmed
# Each owner's own copy of the entries on what is theirs: another tenant's changes, however
# many, never push an owner's history out of their view.
AUDIT_KEPT_PER_OWNER = 10_000
R = TypeVar("R")
Write = Callable[[redis.client.Pipeline], R]


class Transactions:
    """The registry's writes, each one Redis transaction: `write(tx)` reads what it depends on
    (WATCHed), then calls `tx.multi()` and queues its writes, which commit together only if
    nothing watched changed meanwhile."""

    def __init__(self, reader: RegistryReader) -> None:
        self.reader = reader

    def versioned(self, write: Write[R], audit: dict[str, Any] | None = None) -> R:
        """A change of the registry: run with its version WATCHed, again from the start if any
        registry write happened meanwhile; bumps the version and appends the audit entry in the
        same transaction. `write` validates and may raise."""
        return self.run(write, watch=[VERSION], audit=audit, bump=True)  # type: ignore[return-value]

    def once(
        self, watch: list[str], write: Write[bool], audit: dict[str, Any] | None = None
    ) -> bool:
        """Runs `write` with `watch` WATCHed (it returns False, before `multi()`, when what it
        read says not to write); whether it committed: not if anything watched changed
        meanwhile. Writes outside the registry's version: the fleet's records, recovery."""
        return bool(self.run(write, watch=watch, audit=audit, retry=False))

    def run(
        self,
        write: Write[R],
        watch: list[str],
        audit: dict[str, Any] | None = None,
        bump: bool = False,
        retry: bool = True,
    ) -> R | None:
        """`write` as one transaction over `watch`, again while something watched changes
        meanwhile (`retry`, else None); a `write` that queued nothing (no `multi()`) commits
        nothing and its result is returned as is."""
        with self.reader.redis.pipeline() as tx:
            while True:
                try:
                    self.reader._call(tx.watch, *watch)
                    result = write(tx)
                    if not tx.explicit_transaction:
                        return result
                    if bump:
                        tx.incr(VERSION)
                    if audit is not None:
                        append_audit(tx, audit)
                    self.reader._call(tx.execute)
                    return result
                except redis.WatchError:
                    if not retry:
                        return None
                finally:
                    tx.reset()


class Repository:
    """One concern of the registry: its reads through `reader`, its writes through `tx`."""

    def __init__(self, reader: RegistryReader, tx: Transactions) -> None:
        self.reader = reader
        self.tx = tx

    def _call(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        return self.reader._call(fn, *args, **kwargs)

    @property
    def redis(self) -> redis.Redis:
        return self.reader.redis


def audit(who: str, action: str, target: str, *, owner: str, **detail: Any) -> dict[str, Any]:
    """An audit entry for a registry write. `owner` is whose the target is (an owner's name, or
    "admin" for the admin's apps): an owner's view of the log is the entries with theirs."""
    return {"who": who, "action": action, "target": target, "owner": owner, "detail": detail}


def owner_audit(owner: str) -> str:
    """The key of an owner's own copy of the audit log."""
    return key("audit", owner)


def append_audit(tx: redis.client.Pipeline, audit: dict[str, Any]) -> None:
    """Queues the audit entry in the log and in its owner's."""
    entry = {
        "at": repr(time.time()),
        "who": audit["who"],
        "action": audit["action"],
        "target": audit["target"],
        "owner": audit["owner"],
        "detail": json.dumps(audit["detail"], default=str),
    }
    tx.xadd(AUDIT, entry, maxlen=AUDIT_KEPT, approximate=True)
    tx.xadd(owner_audit(audit["owner"]), entry, maxlen=AUDIT_KEPT_PER_OWNER, approximate=True)
