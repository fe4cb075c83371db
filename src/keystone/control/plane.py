"""The control plane's parts, made once per app from settings and shared by its routes."""

from __future__ import annotations

from dataclasses import dataclass

from keystone.contracts.settings import Settings
from keystone.control.accounts import Accounts
from keystone.control.backfills import Backfills
from keystone.control.deadletters import DeadLetters
from keystone.control.fleet import Fleet
from keystone.control.fronting import Fronting
from keystone.control.kafka_access import AppAccess
from keystone.control.receivers import Receivers
from keystone.control.redrives import Redrives
from keystone.control.rewinds import Rewinds
from keystone.control.shadows import Shadows
from keystone.control.silences import Silences
from keystone.control.store import Store
from keystone.control.streams import Streams
from keystone.control.tenancy import Authenticator


@dataclass(frozen=True)
class Plane:
    settings: Settings
    store: Store
    auth: Authenticator
    streams: Streams
    accounts: Accounts
    rewinds: Rewinds
    backfills: Backfills
    dead_letters: DeadLetters
    redrives: Redrives
    fleet: Fleet
    fronting: Fronting
    receivers: Receivers
    silences: Silences
    shadows: Shadows

    @classmethod
    def build(cls, settings: Settings) -> Plane:
        store = Store.connect(settings)
        access = AppAccess(settings, store)
        streams = Streams(settings, store, access)
        return cls(
            settings=settings,
            store=store,
            auth=Authenticator(settings, store),
            streams=streams,
            accounts=Accounts(store, settings, access),
            rewinds=Rewinds(settings, store, streams),
            backfills=Backfills(settings, store, streams),
            dead_letters=DeadLetters(settings, streams),
            redrives=Redrives(settings, store, streams),
            fleet=Fleet(settings, store, access=access),
            fronting=Fronting(settings, store),
            receivers=Receivers(settings, store),
            silences=Silences(settings, streams),
            shadows=Shadows(settings, store, streams),
        )
