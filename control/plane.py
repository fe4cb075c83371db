"""The control plane's parts, made once per app from settings and shared by its routes."""

from __future__ import annotations

from dataclasses import dataclass

from contracts.settings import Settings
from control.accounts import Accounts
from control.fleet import Fleet
from control.store import Store
from control.streams import Streams
from control.tenancy import Authenticator


@dataclass(frozen=True)
class Plane:
    settings: Settings
    store: Store
    auth: Authenticator
    streams: Streams
    accounts: Accounts
    fleet: Fleet

    @classmethod
    def build(cls, settings: Settings) -> Plane:
        store = Store.connect(settings)
        return cls(
            settings=settings,
            store=store,
            auth=Authenticator(settings, store),
            streams=Streams(settings, store),
            accounts=Accounts(store, settings),
            fleet=Fleet(settings, store),
        )
