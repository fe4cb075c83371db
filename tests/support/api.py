"""The control service, called as its users call it: over HTTP, with a token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from keystone.contracts import http


@dataclass(frozen=True)
class Api:
    url: str
    token: str | None

    def call(self, method: str, path: str, body: Any = None, **params: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return http.client().request(
            method, f"{self.url}{path}", json=body, params=params, headers=headers, timeout=60
        )

    def ok(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        answer = self.call(method, path, body, **params)
        assert answer.status_code < 300, f"{method} {path}: {answer.status_code} {answer.text}"
        return answer.json() if answer.content else None

    def audit(self) -> list[dict[str, Any]]:
        """The audit log this caller may read, newest first, as far back as the API gives
        (its `limit` at most): never only the newest few, which the other worker's tests,
        writing to the same log, can push out."""
        return self.ok("GET", "/v1/audit", limit=10000)

    def as_(self, token: str | None) -> Api:
        return Api(self.url, token)


def owner(admin: Api, name: str) -> Api:
    """A new owner, as an API client holding their token."""
    return admin.as_(admin.ok("POST", "/v1/owners", {"name": name})["token"])
