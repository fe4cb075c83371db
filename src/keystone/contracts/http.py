"""One HTTP client per process for what the project asks of its own services (a router's
metrics, Prometheus, a service's health), made when first asked for: each new client loads the
system's CA bundle for an SSL context it never uses on loopback, a tenth of a second of CPU,
which the fleet's check of every router every second made a tenth of a core of control's."""

from __future__ import annotations

import threading
from http.cookiejar import CookieJar, DefaultCookiePolicy

import httpx

_made: httpx.Client | None = None
_making = threading.Lock()


def client() -> httpx.Client:
    """The process's client (thread-safe: its pool is); each request gives its own timeout,
    and no request carries a cookie an earlier answer set."""
    global _made
    with _making:
        if _made is None:
            # Whatever a service sets, it keeps no cookie: each request stands alone.
            _made = httpx.Client(cookies=CookieJar(DefaultCookiePolicy(allowed_domains=[])))
        return _made
