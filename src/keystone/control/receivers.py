"""Owners' alert receivers: registered, listed and removed by their owner (the admin sees and
removes anyone's). A webhook's address is checked against the settings' allow-list as it is
registered (`keystone.alerts.targets`); an e-mail receiver needs the SMTP settings. Where a
receiver sends is never shown again whole (`Receiver.where`). The fleet's leader publishes them
to Alertmanager (`keystone.alerts.publish`)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from keystone.alerts.config import config_yaml
from keystone.alerts.publish import check
from keystone.alerts.targets import Resolve, check_webhook, resolve
from keystone.contracts.errors import Forbidden, Unprocessable
from keystone.contracts.limits import check_limit
from keystone.contracts.receivers import Receiver, ReceiverKind
from keystone.contracts.settings import Settings
from keystone.control.store import Store, audit
from keystone.control.tenancy import Caller

# One address, no display name, nothing Alertmanager would read as a template: one recipient.
EMAIL = re.compile(r"[^@\s,<>\"{}]+@[^@\s,<>\"{}]+\.[^@\s,<>\"{}]+")


class Receivers:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        lookup: Resolve = resolve,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.store = store
        self.lookup = lookup
        self.clock = clock

    def add(self, caller: Caller, receiver: Receiver) -> Receiver:
        """Registers the caller's receiver (`receiver.owner` is set from the caller; the admin
        owns no receiver: theirs is `alert_admin_webhook`)."""
        if caller.admin:
            raise Forbidden("the admin's alerts go to alert_admin_webhook: owners add receivers")
        receiver = receiver.model_copy(update={"owner": caller.name, "created": self.clock()})
        if receiver.kind is ReceiverKind.EMAIL:
            if not EMAIL.fullmatch(receiver.to):
                raise Unprocessable(f"{receiver.to!r} is not one e-mail address", field="to")
            if not self.settings.smtp_smarthost:
                raise Unprocessable(
                    "e-mail receivers need an SMTP server: smtp_smarthost is not set",
                    setting="smtp_smarthost",
                )
        else:
            check_webhook(self.settings, receiver.url, self.lookup)
        # As Alertmanager reads it: what it would refuse is refused now, not left out later.
        refused = check(config_yaml(self.settings, [receiver]))
        if refused is not None:
            raise Unprocessable(f"Alertmanager would not take this receiver: {refused}")

        def within_limit(theirs: list[Receiver]) -> None:
            check_limit(
                self.settings, "max_receivers_per_owner", len(theirs) + 1, "receivers", "name"
            )

        entry = audit(
            caller.name,
            "receiver.create",
            receiver.name,
            owner=caller.name,
            kind=receiver.kind,
            where=receiver.where,
        )
        self.store.receiver_records.add(receiver, entry, within_limit)
        return receiver

    def list(self, caller: Caller) -> list[Receiver]:
        return self.store.receivers(None if caller.admin else caller.name)

    def remove(self, caller: Caller, name: str, owner: str | None = None) -> None:
        """Removes the caller's receiver (the admin names whose: `owner`)."""
        whose = owner if caller.admin and owner else caller.name
        entry = audit(caller.name, "receiver.delete", name, owner=whose)
        self.store.receiver_records.remove(whose, name, entry)
