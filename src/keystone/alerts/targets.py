"""Where an owner's webhook may send: a notification is an outbound request made on the owner's
behalf, from inside the platform's network, so it must not reach what only the platform should
(a metadata service, a database, control itself).

A webhook's scheme must be one of `alert_receiver_schemes`, its port within
`alert_receiver_ports`, and every address its host resolves to global (an IPv6 address that
carries an IPv4 one, that one too), or within `alert_receiver_networks`. Checked when the
receiver is registered and again whenever the configuration is made. Alertmanager follows no
redirect for a receiver (`follow_redirects: false`), so a checked host cannot hand the request
on. It resolves the host again as it sends, and the tenant owns the name: one that answers
otherwise then (DNS rebinding) is what `alert_receiver_proxy` is for, an egress proxy that
enforces the same networks as it connects.
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import re
import socket
from collections.abc import Callable
from urllib.parse import urlsplit

from keystone.contracts.errors import Unavailable, Unprocessable
from keystone.contracts.settings import Settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolve = Callable[[str], list[str]]
DEFAULT_PORTS = {"http": 80, "https": 443}
NAT64 = ipaddress.ip_network("64:ff9b::/96")
LOOKUP_SECONDS = 5.0
# Lookups run here, each bounded by LOOKUP_SECONDS: getaddrinfo itself takes no timeout.
_LOOKUPS = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="resolve")


def resolve(host: str) -> list[str]:
    """Every address `host` resolves to (an address resolves to itself), within
    `LOOKUP_SECONDS`: a name server that does not answer is the tenant's, and holds nobody."""
    lookup = _LOOKUPS.submit(socket.getaddrinfo, host, None, proto=socket.IPPROTO_TCP)
    try:
        found = lookup.result(timeout=LOOKUP_SECONDS)
    except concurrent.futures.TimeoutError as e:
        raise Unavailable(
            f"the webhook's host {host!r} did not resolve within {LOOKUP_SECONDS:.0f} s",
            retry_after=30,
        ) from e
    except (socket.gaierror, UnicodeError) as e:
        raise Unprocessable(f"the webhook's host {host!r} does not resolve") from e
    return sorted({str(info[4][0]) for info in found})


def check_webhook(settings: Settings, url: str, lookup: Resolve = resolve) -> None:
    """Refuses (422, naming the setting that decides) a webhook URL whose scheme or port, or
    any of whose host's addresses, is not allowed; and one Alertmanager would read otherwise
    than checked here (spaces, control characters, a broken escape)."""
    if any(c.isspace() or not c.isprintable() for c in url) or re.search(
        r"%(?![0-9A-Fa-f]{2})", url
    ):
        raise Unprocessable(
            "a webhook's URL may hold no space, control character or broken %-escape"
        )
    try:
        parts = urlsplit(url)
        port = parts.port or DEFAULT_PORTS.get(parts.scheme)
        host = parts.hostname
    except ValueError as e:
        raise Unprocessable(f"the webhook's URL does not read: {e}") from e
    schemes = settings.alert_receiver_schemes
    if parts.scheme not in schemes:
        raise Unprocessable(
            f"a webhook's scheme must be one of {schemes} (alert_receiver_schemes), not "
            f"{parts.scheme or 'none'!r}",
            setting="alert_receiver_schemes",
        )
    if not host:
        raise Unprocessable("a webhook's URL needs a host")
    if port is None or not any(_within(port, ports) for ports in settings.alert_receiver_ports):
        raise Unprocessable(
            f"a webhook's port must be within alert_receiver_ports "
            f"({', '.join(settings.alert_receiver_ports)}), not {port}",
            setting="alert_receiver_ports",
        )
    networks = [ipaddress.ip_network(n) for n in settings.alert_receiver_networks]
    for text in lookup(host):
        address = ipaddress.ip_address(text.split("%")[0])  # an IPv6 zone is not the address's
        if any(address in n for n in networks):
            continue
        if all(inner.is_global for inner in _reached(address)):
            continue
        # Not which address, nor which networks are allowed: the answer would map the
        # platform's own names and networks for whoever asks.
        raise Unprocessable(
            f"the webhook's host {host} resolves to an address a receiver may not reach "
            "(loopback, link-local, private or otherwise not global): only within "
            "alert_receiver_networks",
            setting="alert_receiver_networks",
        )


def _reached(address: Address) -> list[Address]:
    """The address, and the IPv4 address an IPv6 one carries to (mapped, compatible, 6to4,
    Teredo, NAT64): each must be global."""
    found: list[Address] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        packed = int(address)
        if address.ipv4_mapped is not None:
            found.append(address.ipv4_mapped)
        if address.sixtofour is not None:
            found.append(address.sixtofour)
        if address.teredo is not None:
            found.extend(address.teredo)
        if address in NAT64 or packed >> 32 == 0:  # 64:ff9b::/96, and ::a.b.c.d
            found.append(ipaddress.IPv4Address(packed & 0xFFFFFFFF))
    return found


def _within(port: int, ports: str) -> bool:
    low, _, high = ports.partition("-")
    return int(low) <= port <= int(high or low)
