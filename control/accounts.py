"""Owners and producing apps: registered, their secrets rotated, revoked; every change audited.

Owners are the admin's to manage. Apps belong to the owner who registered them (the admin's to
anyone's): their owner rotates or revokes their key; a stream's owner grants them the right to
post to it (`Streams.grant`). A secret is answered once, when made, and stored only hashed.
"""

from __future__ import annotations

from contracts.errors import Conflict
from control.store import App, Store, audit
from control.tenancy import ADMIN, Caller


class Accounts:
    def __init__(self, store: Store) -> None:
        self.store = store

    # Owners

    def create_owner(self, caller: Caller, name: str) -> str:
        caller.require_admin()
        if name == ADMIN:
            raise Conflict(f"{ADMIN!r} is the admin's name")
        return self.store.create_owner(name, audit(caller.name, "owner.create", name))

    def rotate_owner(self, caller: Caller, name: str) -> str:
        caller.require_admin()
        return self.store.rotate_owner(name, audit(caller.name, "owner.rotate", name))

    def delete_owner(self, caller: Caller, name: str) -> None:
        caller.require_admin()
        self.store.delete_owner(name, audit(caller.name, "owner.delete", name))

    def owners(self, caller: Caller) -> list[str]:
        caller.require_admin()
        return self.store.owners()

    # Apps

    def create_app(self, caller: Caller, name: str, rate: int) -> str:
        owner = "" if caller.admin else caller.name
        return self.store.create_app(
            name, rate, owner, audit(caller.name, "app.create", name, rate=rate)
        )

    def apps(self, caller: Caller) -> list[App]:
        return [a for a in self.store.apps() if caller.owns(a.owner)]

    def app(self, caller: Caller, name: str) -> App:
        return caller.visible_app(self.store.get_app(name))

    def rotate_app(self, caller: Caller, name: str) -> str:
        self.app(caller, name)
        return self.store.rotate_app(name, audit(caller.name, "app.rotate", name))

    def delete_app(self, caller: Caller, name: str) -> None:
        self.app(caller, name)
        self.store.delete_app(name, audit(caller.name, "app.delete", name))
