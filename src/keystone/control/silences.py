"""Silences of streams' alerts, kept by Alertmanager.

- **An owner's** (`Silences`): made with the stream's `stream` and `owner` labels (and an
  alert's name, or every alert of the stream), listed and expired only through the stream, by
  its owner (another owner's stream does not exist for them: 404, and so does a silence that
  is not this stream's).
- **Control's own** (`OperationSilences`): while an operation control started runs on a
  stream (a rewind replaying, a backfill, a redeploy or a resize: its router stopped, started
  anew and running for `alert_redeploy_settle_seconds`), the stream's lag and delivery-rate
  alerts are silenced: those are what the operation itself moves. Level-triggered: one
  silence per stream, made, renewed and expired by the fleet's leader, each lasting
  `OPERATION_SILENCE_SECONDS` past the last renewal, so that one control left behind by a
  crash ends by itself.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from keystone.alerts.client import Alertmanager
from keystone.contracts.errors import NotFound, Unprocessable
from keystone.contracts.limits import check_limit
from keystone.contracts.recovery import Backfill, Rewind
from keystone.contracts.registry import RegistryReader, RouterPhase, RouterState
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.control.operations import iso
from keystone.control.streams import Streams
from keystone.control.tenancy import Caller
from keystone.dashboards.rules import ALERTS, DELIVERY_RATE_LOW, LAG_GROWING

log = logging.getLogger(__name__)


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
        check_limit(self.settings, "max_silence_hours", math.ceil(hours), "hours", "hours")
        existing = self.list(caller, spec.name)
        mine = [s for s in existing if s.get("createdBy") != CONTROL]
        check_limit(
            self.settings, "max_silences_per_stream", len(mine) + 1, "silences of the stream"
        )
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
                "startsAt": iso(now),
                "endsAt": iso(now + hours * 3600),
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


CONTROL = "keystone-control"  # the createdBy of control's own silences
OPERATION_SILENCE_SECONDS = 600.0
QUIETED = (LAG_GROWING, DELIVERY_RATE_LOW)  # what an operation moves


def operations(
    state: RouterState | None,
    rewinds: dict[str, Rewind],
    backfills: dict[str, Backfill],
    now: float,
    settle_seconds: float,
) -> list[str]:
    """What control runs on the stream now, in words ([] : nothing): a redeploy (or a resize)
    stops the router and starts it anew, and lasts until the new one has run `settle_seconds`
    (its queries start and catch up). A router started again after it died, or one that
    stopped answering, is no operation: that is what the alerts are for."""
    found = [f"rewind {r.id} of {r.output}" for r in rewinds.values() if r.active]
    found += [f"backfill {b.id} of {b.output}" for b in backfills.values() if b.active]
    if state is not None and not state.failures:
        stopping = state.state in (RouterPhase.STOPPING, RouterPhase.PENDING)
        alive = state.state in (RouterPhase.STARTING, RouterPhase.RUNNING)
        if stopping or (alive and now - state.started < settle_seconds):
            found.append("its router's redeploy")
    return found


class OperationSilences:
    """Control's own silences, made current by `step` (`operations`)."""

    def __init__(
        self,
        store: RegistryReader,
        alertmanager: Alertmanager,
        settle_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`settle_seconds`: how long a redeployed router runs before its alerts are heard."""
        self.store = store
        self.alertmanager = alertmanager
        self.settle_seconds = settle_seconds
        self.clock = clock

    def step(self, specs: list[StreamSpec]) -> None:
        now = self.clock()
        ours: dict[str, list[dict[str, Any]]] = {}
        for silence in self.alertmanager.silences({}):
            if silence.get("createdBy") != CONTROL:
                continue
            if silence.get("status", {}).get("state") == "expired":
                continue
            stream = {m["name"]: m["value"] for m in silence["matchers"]}.get("stream", "")
            ours.setdefault(stream, []).append(silence)
        states = self.store.router_states()
        for spec in specs:
            running = operations(
                states.get(spec.name),
                self.store.rewinds(spec.name),
                self.store.backfills(spec.name),
                now,
                self.settle_seconds,
            )
            current = ours.pop(spec.name, [])
            if not running:
                for silence in current:
                    self.alertmanager.expire(silence["id"])
                    log.info("alerts of %s heard again: %s ended", spec.name, silence["comment"])
                continue
            comment = f"while {'; '.join(running)} runs"
            kept = current[0] if current else None
            if (
                kept is not None
                and kept["comment"] == comment
                and _ends(kept) - now > (OPERATION_SILENCE_SECONDS / 2)
            ):
                continue
            body = _silence(spec, comment, now)
            if kept is not None:
                body["id"] = kept["id"]  # renewed in place
            else:
                log.info("lag and delivery alerts of %s silenced %s", spec.name, comment)
            self.alertmanager.add_silence(body)
            for extra in current[1:]:
                self.alertmanager.expire(extra["id"])
        for left in ours.values():  # of streams gone
            for silence in left:
                self.alertmanager.expire(silence["id"])


def _silence(spec: StreamSpec, comment: str, now: float) -> dict[str, Any]:
    exact = {"stream": spec.name, "owner": spec.owner}
    return {
        "matchers": [
            *({"name": k, "value": v, "isRegex": False, "isEqual": True} for k, v in exact.items()),
            {"name": "alertname", "value": "|".join(QUIETED), "isRegex": True, "isEqual": True},
        ],
        "startsAt": iso(now),
        "endsAt": iso(now + OPERATION_SILENCE_SECONDS),
        "createdBy": CONTROL,
        "comment": comment,
    }


def _ends(silence: dict[str, Any]) -> float:
    return datetime.fromisoformat(silence["endsAt"].replace("Z", "+00:00")).timestamp()
