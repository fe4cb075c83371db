"""The owners' alert receivers (`contracts.receivers.Receiver`), each added or removed in a
registry transaction with its audit entry: the fleet's leader remakes Alertmanager's
configuration from them (`keystone.alerts.publish`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from keystone.contracts.errors import Conflict, NotFound
from keystone.contracts.receivers import Receiver, receiver_field
from keystone.contracts.registry import RECEIVERS
from keystone.control.store.base import Repository


class ReceiverRecords(Repository):
    def add(
        self,
        receiver: Receiver,
        audit: dict[str, Any],
        within_limit: Callable[[list[Receiver]], None],
    ) -> None:
        """Adds it (409 if its owner has one of that name); `within_limit(theirs)`, given the
        owner's receivers, refuses one too many, in the same transaction."""

        def write(tx: redis.client.Pipeline) -> None:
            if tx.hexists(RECEIVERS, receiver.field):
                raise Conflict(f"{receiver.owner} has a receiver named {receiver.name!r}")
            within_limit(self.reader.receivers(receiver.owner))
            tx.multi()
            tx.hset(RECEIVERS, receiver.field, receiver.model_dump_json())

        self.tx.versioned(write, audit)

    def remove(self, owner: str, name: str, audit: dict[str, Any]) -> None:
        field = receiver_field(owner, name)

        def write(tx: redis.client.Pipeline) -> None:
            if not tx.hexists(RECEIVERS, field):
                raise NotFound(f"{owner} has no receiver named {name!r}")
            tx.multi()
            tx.hdel(RECEIVERS, field)

        self.tx.versioned(write, audit)
