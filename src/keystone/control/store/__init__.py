"""The registry as control writes it: a repository per concern over one connection, each write
one transaction through the same helper (`base.Transactions`). Its keys and its reading are
`keystone.contracts.registry`'s; `Store` reads as any `RegistryReader` does.

    specs       the streams' specs, their retired names and claimed topics, hashing keys
    principals  owners and apps, each with a hashed secret
    fleet       the fleet's records: router states, traffic samples, its leader's lease
    fronting    the fronting cluster that takes writes, and its switches
    recovery    restore points and the latest operation of each kind (rewinds, backfills,
                redrives)
    sessions    web sessions
    audit       the audit log
"""

from __future__ import annotations

import redis

from keystone.contracts.registry import RegistryReader
from keystone.control.store.audit import AuditEntry, AuditLog
from keystone.control.store.base import Transactions, audit
from keystone.control.store.fleet import FleetRecords
from keystone.control.store.fronting import FrontingRecords
from keystone.control.store.principals import Principals
from keystone.control.store.receivers import ReceiverRecords
from keystone.control.store.recovery import Planned, RecoveryRecords
from keystone.control.store.sessions import Sessions
from keystone.control.store.specs import Specs, stored_form

__all__ = ["AuditEntry", "Planned", "Store", "audit", "stored_form"]


class Store(RegistryReader):
    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        tx = Transactions(self)
        self.specs = Specs(self, tx)
        self.principals = Principals(self, tx)
        self.fleet = FleetRecords(self, tx)
        self.fronting_records = FrontingRecords(self, tx)
        self.recovery = RecoveryRecords(self, tx)
        self.sessions = Sessions(self, tx)
        self.receiver_records = ReceiverRecords(self, tx)
        self.audit = AuditLog(self, tx)
