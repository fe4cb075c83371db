"""Alertmanager's API (v2), as control uses it: the alerts it holds and their state, and the
silences control makes for owners. Its answers are read as given; an Alertmanager that does not
answer is a 503 to the caller."""

from __future__ import annotations

from typing import Any

import httpx

from keystone.alerts.config import matcher
from keystone.contracts import http
from keystone.contracts.errors import NotFound, Unavailable, Unprocessable
from keystone.contracts.settings import Settings

TIMEOUT = 10.0


class Alertmanager:
    def __init__(self, settings: Settings) -> None:
        self.url = f"{settings.alertmanager_url}/api/v2"
        self.settings = settings

    def alerts(self, labels: dict[str, str]) -> list[dict[str, Any]]:
        """The alerts whose labels are `labels` (and any others), firing, silenced or
        inhibited, each with its `status` (`state`, `silencedBy`, `inhibitedBy`) and the
        `receivers` it goes to."""
        return self._call("GET", "/alerts", params={"filter": _filters(labels)})

    def silences(self, labels: dict[str, str]) -> list[dict[str, Any]]:
        """The silences that match exactly `labels` among their matchers (and maybe more)."""
        found = self._call("GET", "/silences", params={"filter": _filters(labels)})
        return [s for s in found if _matches_exactly(s, labels)]

    def silence(self, silence_id: str) -> dict[str, Any]:
        return self._call("GET", f"/silence/{silence_id}")

    def add_silence(self, body: dict[str, Any]) -> str:
        return self._call("POST", "/silences", json=body)["silenceID"]

    def expire(self, silence_id: str) -> None:
        self._call("DELETE", f"/silence/{silence_id}")

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        auth = self.settings.alertmanager_auth()  # read each time: the stack may make it later
        try:
            answer = http.client().request(
                method, f"{self.url}{path}", timeout=TIMEOUT, auth=auth, **kwargs
            )
        except httpx.HTTPError as e:
            raise Unavailable(f"Alertmanager did not answer: {e}", retry_after=5) from e
        if answer.status_code == 404:
            raise NotFound(f"Alertmanager has no {path.strip('/')}")
        if answer.status_code == 400:  # what was asked cannot be (a silence ending before now)
            raise Unprocessable(f"Alertmanager refused it: {answer.text[:200]}")
        if answer.status_code >= 300:
            raise Unavailable(
                f"Alertmanager answered {answer.status_code}: {answer.text[:200]}", retry_after=5
            )
        return answer.json() if answer.content else None


def _filters(labels: dict[str, str]) -> list[str]:
    return [matcher(name, value) for name, value in sorted(labels.items())]


def _matches_exactly(silence: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether the silence holds, for each of `labels`, an equality matcher of its value (a
    regular expression that matches it too is not one owner's silence of one stream)."""
    exact = {
        m["name"]: m["value"]
        for m in silence.get("matchers", [])
        if not m.get("isRegex") and m.get("isEqual", True)
    }
    return all(exact.get(name) == value for name, value in labels.items())
