"""How every client of Elasticsearch connects (the router's bulk writer, its index templates,
the audit's read-back, the benchmarks): `elasticsearch_url`, and for a cluster that asks for
them, basic credentials (`elasticsearch_username`, `elasticsearch_password` or
`elasticsearch_password_file`) and the CA that signed its certificate
(`elasticsearch_ca_file`; default: the system's authorities). The embedded node (Elasticsearch
7.10 without its security modules) asks for neither.

A client is made by `Connection.client` or, where one is wanted per process,
`Connection.shared`; none builds its own. The password reaches routers through the environment
(the settings' variables) and Spark's tasks inside the writer they run, never argv or a log
(`Connection`'s repr leaves it out).
"""

from __future__ import annotations

import ssl
import threading
from dataclasses import dataclass, field

import httpx

from keystone.contracts.errors import SinkError
from keystone.contracts.settings import Settings, given_secret

_shared: dict[Connection, httpx.Client] = {}
_making = threading.Lock()


@dataclass(frozen=True)
class Connection:
    url: str
    username: str = ""
    password: str = field(default="", repr=False)
    ca_file: str = ""

    @classmethod
    def of(cls, settings: Settings) -> Connection:
        """The settings' connection (a password file read now: a rotated one is used by the
        next connection made)."""
        try:
            password = given_secret(
                settings.elasticsearch_password, settings.elasticsearch_password_file
            )
        except OSError as e:
            raise SinkError(f"Elasticsearch's password file is unreadable: {e}") from e
        return cls(
            settings.elasticsearch_url,
            settings.elasticsearch_username,
            password,
            settings.elasticsearch_ca_file,
        )

    def client(self, timeout: float = 60) -> httpx.Client:
        """A new client, its paths relative to the URL."""
        try:
            verify = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else True
        except OSError as e:
            raise SinkError(f"Elasticsearch's CA file is unreadable: {e}") from e
        return httpx.Client(
            base_url=self.url,
            auth=httpx.BasicAuth(self.username, self.password) if self.username else None,
            verify=verify,
            timeout=timeout,
        )

    def shared(self) -> httpx.Client:
        """This process's client of this connection, made once: a new client loads its
        authorities, a tenth of a second of CPU, which each Spark task would pay again."""
        with _making:
            made = _shared.get(self)
            if made is None:
                made = _shared[self] = self.client()
            return made
