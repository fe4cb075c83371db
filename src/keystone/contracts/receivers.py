"""Where an owner's alerts go: the receivers they register, kept in the registry
(`keystone:receivers`, one field per owner's receiver) and turned by control into Alertmanager's
configuration (`keystone.alerts.config`).

A receiver's address may hold a secret (a Slack webhook's URL is its credential): it is stored
as given, for Alertmanager, and never shown again (`Receiver.where`). Where a webhook may point
is checked when it is registered (`keystone.alerts.targets`) and again each time the
configuration is made, since settings may have changed since.
"""

from __future__ import annotations

from enum import StrEnum
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field


class ReceiverKind(StrEnum):
    WEBHOOK = "webhook"  # Alertmanager's JSON, POSTed
    SLACK = "slack"  # a Slack-compatible incoming webhook
    EMAIL = "email"  # through the SMTP server settings name


class Receiver(BaseModel):
    """One of an owner's receivers, as the registry keeps it (read back as untrusted)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    owner: str
    kind: ReceiverKind
    url: str = Field("", description="A webhook's or Slack's address: a secret, never shown.")
    to: str = Field("", description="An e-mail receiver's address.")
    channel: str = Field("", description="A Slack receiver's channel (none: the webhook's own).")
    send_resolved: bool = True
    created: float = 0.0

    @property
    def field(self) -> str:
        """Its field in the registry's hash."""
        return receiver_field(self.owner, self.name)

    @property
    def where(self) -> str:
        """Where it sends, as shown: a URL's scheme and host only (its path or query may be
        its credential), or the e-mail address."""
        if self.kind is ReceiverKind.EMAIL:
            return self.to
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.hostname or ''}/…"


def receiver_field(owner: str, name: str) -> str:
    return f"{owner}/{name}"  # names never hold '/'
