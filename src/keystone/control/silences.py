"""Owners' silences of their streams' alerts, kept by Alertmanager: made with the stream's
`stream` and `owner` labels (and an alert's name, or every alert of the stream), listed and
expired only through the stream, by its owner (another owner's stream does not exist for
them: 404, and so does a silence that is not this stream's)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from keystone.alerts.client import Alertmanager
from keystone.contracts.errors import NotFound, Unprocessable
from keystone.contracts.limits import check_limit
from keystone.contracts.settings import Settings
from keystone.control.streams import Streams
from keystone.control.tenancy import Caller
from keystone.dashboards.rules import ALERTS


class Silences:
    def __init__(
        self,
        settings: Settings,
        streams: Streams,
        alertmanager: Alertmanager | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.streams = streams
        self.alertmanager = alertmanager if alertmanager is not None else Alertmanager(settings)
        self.clock = clock

    def add(
        self, caller: Caller, stream: str, alert: str | None, hours: float, comment: str
    ) -> str:
        """Silences the stream's alerts (one, by name) for `hours`; the silence's id."""
        spec = self.streams.get(caller, stream)
        if alert is not None and alert not in ALERTS:
            raise Unprocessable(f"no alert {alert!r}: a stream's are {', '.join(ALERTS)}")
        check_limit(self.settings, "max_silence_hours", int(hours + 0.999), "hours", "hours")
        now = self.clock()
        labels = {"stream": spec.name, "owner": spec.owner} | (
            {"alertname": alert} if alert else {}
        )
        return self.alertmanager.add_silence(
            {
                "matchers": [
                    {"name": k, "value": v, "isRegex": False, "isEqual": True}
                    for k, v in labels.items()
                ],
                "startsAt": _iso(now),
                "endsAt": _iso(now + hours * 3600),
                "createdBy": caller.name,
                "comment": comment or f"silenced by {caller.name}",
            }
        )

    def list(self, caller: Caller, stream: str) -> list[dict[str, Any]]:
        """The stream's silences, not yet expired."""
        spec = self.streams.get(caller, stream)
        found = self.alertmanager.silences({"stream": spec.name, "owner": spec.owner})
        return [s for s in found if s.get("status", {}).get("state") != "expired"]

    def expire(self, caller: Caller, stream: str, silence_id: str) -> None:
        spec = self.streams.get(caller, stream)
        mine = {s["id"] for s in self.list(caller, spec.name)}
        if silence_id not in mine:
            raise NotFound(f"stream {stream!r} has no silence {silence_id!r}")
        self.alertmanager.expire(silence_id)


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")
