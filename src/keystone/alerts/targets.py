"""Where an owner's webhook may send: a notification is an outbound request made on the owner's
behalf, from inside the platform's network, so it must not reach what only the platform should
(a metadata service, a database, control itself).

A webhook's scheme must be one of `alert_receiver_schemes`, and every address its host resolves
to must be global, or within `alert_receiver_networks`. Checked when the receiver is registered
and again whenever the configuration is made. Alertmanager follows no redirect for a receiver
(`follow_redirects: false`), so a checked host cannot hand the request on; it resolves the host
again as it sends, so a name whose addresses change after the check is the residual risk:
register an address, or a name under your control.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from urllib.parse import urlsplit

from keystone.contracts.errors import Unprocessable
from keystone.contracts.settings import Settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolve = Callable[[str], list[str]]


def resolve(host: str) -> list[str]:
    """Every address `host` resolves to (an address resolves to itself)."""
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except socket.gaierror as e:
        raise Unprocessable(f"the webhook's host {host!r} does not resolve: {e.strerror}") from e
    return sorted({str(info[4][0]) for info in found})


def check_webhook(settings: Settings, url: str, lookup: Resolve = resolve) -> None:
    """Refuses (422, naming the setting that decides) a webhook URL whose scheme, or any of
    whose host's addresses, is not allowed."""
    parts = urlsplit(url)
    schemes = settings.alert_receiver_schemes
    if parts.scheme not in schemes:
        raise Unprocessable(
            f"a webhook's scheme must be one of {schemes} (alert_receiver_schemes), not "
            f"{parts.scheme or 'none'!r}",
            setting="alert_receiver_schemes",
        )
    if not parts.hostname:
        raise Unprocessable("a webhook's URL needs a host")
    networks = [ipaddress.ip_network(n) for n in settings.alert_receiver_networks]
    for text in lookup(parts.hostname):
        address = ipaddress.ip_address(text.split("%")[0])  # an IPv6 zone is not the address's
        if address.is_global or any(address in n for n in networks):
            continue
        raise Unprocessable(
            f"the webhook's host {parts.hostname} is {address}, {_kind(address)} address, which "
            "a receiver may reach only within alert_receiver_networks "
            f"({', '.join(settings.alert_receiver_networks) or 'none set'})",
            setting="alert_receiver_networks",
        )


def _kind(address: Address) -> str:
    if address.is_loopback:
        return "a loopback"
    if address.is_link_local:
        return "a link-local"
    if address.is_private:
        return "a private"
    return "a non-global"
