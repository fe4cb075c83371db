"""Control's own silences while an operation it started runs on a stream, level-triggered over
a fake Alertmanager and registry (the real Alertmanager: tests/alerts/)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from keystone.contracts.recovery import Backfill, JobPhase, RewindPhase
from keystone.contracts.registry import RouterPhase, RouterState
from keystone.contracts.spec import load_spec
from keystone.control.silences import (
    CONTROL,
    OPERATION_SILENCE_SECONDS,
    OperationSilences,
    operations,
)
from tests.contracts.test_recovery import rewind

NOW = 1_800_000_000.0
SPEC = load_spec(
    {
        "name": "plays",
        "owner": "team-a",
        "outputs": [{"name": "search", "sink": {"type": "elasticsearch"}}],
    }
)


def backfill(**changes: object) -> Backfill:
    fields = {"id": "bf-0123456789ab", "output": "search", "start": 0, "end": 1, "rate": 10}
    return Backfill(**{**fields, "requested_at": NOW, "by": "team-a", **changes})  # type: ignore[arg-type]


def test_what_control_runs_on_a_stream_and_what_is_no_operation() -> None:
    def running_since(started: float, **more: object) -> RouterState:
        return RouterState(state=RouterPhase.RUNNING, started=started, **more)  # type: ignore[arg-type]

    settled = running_since(NOW - 600)
    assert operations(settled, {}, {}, NOW, 300) == []
    assert operations(settled, {"search": rewind()}, {"search": backfill()}, NOW, 300) == [
        "rewind rw-0123456789ab of search",
        "backfill bf-0123456789ab of search",
    ]
    done = rewind(phase=RewindPhase.CAUGHT_UP)
    finished = {"search": backfill(phase=JobPhase.DONE)}
    assert operations(settled, {"search": done}, finished, NOW, 300) == []
    redeploy = ["its router's redeploy"]
    for phase in (RouterPhase.STOPPING, RouterPhase.PENDING):
        assert operations(RouterState(state=phase), {}, {}, NOW, 300) == redeploy
    assert operations(running_since(NOW - 60), {}, {}, NOW, 300) == redeploy  # settling
    # Started again after it died: the alerts are for that.
    assert operations(running_since(NOW - 60, failures=1), {}, {}, NOW, 300) == []


class FakeAlertmanager:
    def __init__(self) -> None:
        self.held: dict[str, dict[str, Any]] = {}
        self.expired: list[str] = []

    def silences(self, labels: dict[str, str]) -> list[dict[str, Any]]:
        return list(self.held.values())

    def add_silence(self, body: dict[str, Any]) -> str:
        silence_id = body.get("id") or f"s{len(self.held) + len(self.expired)}"
        self.held[silence_id] = body | {"id": silence_id, "status": {"state": "active"}}
        return silence_id

    def expire(self, silence_id: str) -> None:
        self.held.pop(silence_id)
        self.expired.append(silence_id)


class FakeRegistry:
    def __init__(self) -> None:
        self.rewound: dict = {}
        self.state = RouterState(state=RouterPhase.RUNNING, started=NOW - 3600)

    def router_states(self) -> dict[str, RouterState]:
        return {"plays": self.state}

    def rewinds(self, stream: str) -> dict:
        return self.rewound

    def backfills(self, stream: str) -> dict:
        return {}


def test_a_streams_lag_and_delivery_alerts_are_silenced_while_an_operation_runs() -> None:
    clock = [NOW]
    alertmanager, registry = FakeAlertmanager(), FakeRegistry()
    quieting = OperationSilences(registry, alertmanager, 300, lambda: clock[0])  # type: ignore[arg-type]
    quieting.step([SPEC])
    assert alertmanager.held == {}  # nothing runs
    registry.rewound = {"search": rewind()}
    quieting.step([SPEC])
    (silence,) = alertmanager.held.values()
    assert silence["createdBy"] == CONTROL
    assert silence["comment"] == "while rewind rw-0123456789ab of search runs"
    matchers = {m["name"]: (m["value"], m["isRegex"]) for m in silence["matchers"]}
    assert matchers == {
        "stream": ("plays", False),
        "owner": ("team-a", False),
        "alertname": ("KeystoneLagGrowing|KeystoneDeliveryRateLow", True),
    }
    ends = datetime.fromtimestamp(NOW + OPERATION_SILENCE_SECONDS, UTC)
    assert silence["endsAt"] == ends.isoformat().replace("+00:00", "Z")
    quieting.step([SPEC])  # nothing changed: left as it is
    assert list(alertmanager.held) == [silence["id"]] and alertmanager.expired == []
    clock[0] += OPERATION_SILENCE_SECONDS * 0.6  # renewed in place before it ends
    quieting.step([SPEC])
    assert list(alertmanager.held) == [silence["id"]]
    assert alertmanager.held[silence["id"]]["endsAt"] > silence["endsAt"]
    registry.rewound = {"search": rewind(phase=RewindPhase.CAUGHT_UP)}
    quieting.step([SPEC])  # caught up: expired
    assert alertmanager.held == {} and alertmanager.expired == [silence["id"]]
