"""Owners and producing apps: registered, their secrets rotated, revoked; every change audited.

Owners are the admin's to manage. Apps belong to the owner who registered them (the admin's to
anyone's): their owner rotates or revokes their key; a stream's owner grants them the right to
post to it (`Streams.grant`). A secret is answered once, when made, and stored only hashed.
"""

from __future__ import annotations

from keystone.contracts.errors import Conflict, LimitExceeded, NotFound
from keystone.contracts.limits import Limits, check_limit
from keystone.contracts.registry import App
from keystone.control.kafka_access import AppAccess
from keystone.control.store import Store, audit
from keystone.control.tenancy import ADMIN, Caller


class Accounts:
    def __init__(self, store: Store, limits: Limits, access: AppAccess) -> None:
        self.store = store
        self.limits = limits
        self.access = access

    # Owners

    def create_owner(self, caller: Caller, name: str) -> str:
        caller.require_admin()
        if name == ADMIN:
            raise Conflict(f"{ADMIN!r} is the admin's name")
        return self.store.principals.create_owner(
            name, audit(caller.name, "owner.create", name, owner=ADMIN)
        )

    def rotate_owner(self, caller: Caller, name: str) -> str:
        caller.require_admin()
        return self.store.principals.rotate_owner(
            name, audit(caller.name, "owner.rotate", name, owner=ADMIN)
        )

    def delete_owner(self, caller: Caller, name: str) -> None:
        caller.require_admin()
        self.store.principals.delete_owner(
            name, audit(caller.name, "owner.delete", name, owner=ADMIN)
        )

    def owners(self, caller: Caller) -> list[str]:
        caller.require_admin()
        return self.store.principals.owners()

    # Apps

    def create_app(self, caller: Caller, name: str, rate: int | None) -> tuple[str, int]:
        """Registers the app; its key (shown once) and its quota. The admin's apps have no
        quota unless given one; an owner's have one, by default the most an owner may give."""
        limits = self.limits
        if caller.admin:
            owner, rate = "", rate or 0
        else:
            owner = caller.name
            if rate is None:
                rate = limits.max_app_rate
            elif rate == 0:
                raise LimitExceeded(
                    "only the admin may register an app without a quota (rate 0)",
                    setting="max_app_rate",
                    limit=limits.max_app_rate,
                    field="rate",
                )
            check_limit(limits, "max_app_rate", rate, "events per second", "rate")

        def within_limit(apps: list[App]) -> None:  # in the transaction that registers it
            if owner:
                mine = sum(1 for a in apps if a.owner == owner)
                check_limit(limits, "max_apps_per_owner", mine + 1, "apps of this owner", "name")

        entry = audit(caller.name, "app.create", name, owner=owner or ADMIN, rate=rate)
        return self.store.principals.create_app(name, rate, owner, entry, within_limit), rate

    def apps(self, caller: Caller) -> list[App]:
        return [a for a in self.store.apps() if caller.owns(a.owner)]

    def app(self, caller: Caller, name: str) -> App:
        return caller.visible_app(self.store.get_app(name))

    def rotate_app(self, caller: Caller, name: str) -> tuple[str, str | None]:
        """A new key, and a new Kafka password if the app holds a credential: Kafka's first,
        so that a Kafka away changes nothing (the old key and password go on working)."""
        app = self.app(caller, name)

        def rotate() -> str:
            return self.store.principals.rotate_app(
                name,
                audit(caller.name, "app.rotate", name, owner=app.owner or ADMIN),
                _holder(caller),
            )

        if not app.kafka:
            return rotate(), None
        password, key = self.access.issue(name, rotate)
        return key, password

    def delete_app(self, caller: Caller, name: str) -> None:
        app = self.app(caller, name)
        self.store.principals.delete_app(
            name, audit(caller.name, "app.delete", name, owner=app.owner or ADMIN), _holder(caller)
        )
        if app.kafka:
            self.access.sync()  # its credential and ACLs deleted

    def issue_kafka(self, caller: Caller, name: str) -> str:
        """The app's Kafka password (made anew if it had one), shown once."""
        app = self.app(caller, name)
        self.access.require()
        entry = audit(caller.name, "app.kafka.issue", name, owner=app.owner or ADMIN)
        password, _ = self.access.issue(
            name, lambda: self.store.principals.set_app_kafka(name, True, entry, _holder(caller))
        )
        return password

    def revoke_kafka(self, caller: Caller, name: str) -> None:
        app = self.app(caller, name)
        self.access.require()
        if not app.kafka:
            raise NotFound(f"app {name!r} holds no Kafka credential")
        entry = audit(caller.name, "app.kafka.revoke", name, owner=app.owner or ADMIN)
        self.store.principals.set_app_kafka(name, False, entry, _holder(caller))
        self.access.sync()


def _holder(caller: Caller) -> str | None:
    """Whose the app must still be when the write commits: any for the admin."""
    return None if caller.admin else caller.name
