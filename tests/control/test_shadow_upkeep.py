"""The fleet's step for shadows (`control.shadows.ShadowUpkeep`): a shadow past its time is
ended as expired; an ending one's targets are removed only once no router runs it (its router
said so, or none is deployed), then it has ended. Its targets' removal on the real stack:
tests/control/test_shadows.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keystone.contracts.checkpoints import checkpoint_dir
from keystone.contracts.errors import Unavailable
from keystone.contracts.settings import Settings
from keystone.contracts.shadows import Shadow, ShadowEnd, ShadowPhase, stopped_path
from keystone.contracts.spec import OutputSpec, load_spec
from keystone.control.shadows import ShadowUpkeep
from keystone.router.sinks.route import Route

LIVE = {"name": "out", "filter": "n > 1", "sink": {"type": "hive"}}
SPEC = load_spec({"name": "orders", "owner": "team", "outputs": [LIVE]})
NOW = 1_000_000.0


def shadow(phase: ShadowPhase = ShadowPhase.RUNNING, expires_at: float = NOW + 60) -> Shadow:
    return Shadow(
        id="sh-0123456789ab",
        output="out",
        version=OutputSpec.model_validate({**LIVE, "filter": "n > 2"}),
        live=OutputSpec.model_validate(LIVE),
        start={0: 0},
        expires_at=expires_at,
        rate=10,
        requested_at=NOW - 100,
        by="team",
        phase=phase,
        end=None if phase is ShadowPhase.RUNNING else ShadowEnd.DROPPED,
    )


@dataclass
class FakeRecords:
    shadows: dict[str, Shadow]
    audits: list[dict[str, Any]] = field(default_factory=list)

    def update(self, stream: str, record: Shadow, holds: Any, audit: Any = None) -> bool:
        current = self.shadows.get(record.output)
        if current is None or current.id != record.id or not holds(current):
            return False
        self.shadows[record.output] = record
        if audit is not None:
            self.audits.append(audit)
        return True


@dataclass
class FakeStore:
    recovery: FakeRecords

    def operations(self, kind: type, stream: str) -> dict[str, Shadow]:
        assert kind is Shadow and stream == "orders"
        return dict(self.recovery.shadows)


@dataclass
class Removals:
    routes: list[Route] = field(default_factory=list)
    failing: bool = False

    def __call__(self, route: Route) -> list[str]:
        if self.failing:
            raise Unavailable("Elasticsearch unreachable", retry_after=5)
        self.routes.append(route)
        return ["table keystone.orders__out__shadow"]


def upkeep(tmp_path: Path, record: Shadow) -> tuple[ShadowUpkeep, FakeRecords, Removals]:
    records, removals = FakeRecords({"out": record}), Removals()
    store = FakeStore(records)
    kept = ShadowUpkeep(Settings(state_dir=tmp_path), store, lambda: NOW, removals)  # type: ignore[arg-type]
    return kept, records, removals


def test_a_shadow_past_its_time_ends_as_expired(tmp_path: Path) -> None:
    kept, records, removals = upkeep(tmp_path, shadow(expires_at=NOW - 1))
    kept.step(SPEC, deployed=True)
    ended = records.shadows["out"]
    assert (ended.phase, ended.end) == (ShadowPhase.ENDING, ShadowEnd.EXPIRED)
    assert [a["action"] for a in records.audits] == ["output.shadow.expire"]
    assert removals.routes == []  # not before its router says it stopped it
    kept, records, _ = upkeep(tmp_path, shadow())
    kept.step(SPEC, deployed=True)
    assert records.shadows["out"].phase is ShadowPhase.RUNNING  # still in its time


def test_an_ending_shadows_targets_go_once_its_router_says_it_stopped_it(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    kept, records, removals = upkeep(tmp_path, shadow(ShadowPhase.ENDING))
    kept.step(SPEC, deployed=True)
    assert records.shadows["out"].phase is ShadowPhase.ENDING and removals.routes == []
    checkpoint = checkpoint_dir(settings, "orders", "sh-0123456789ab")
    checkpoint.mkdir(parents=True)
    marker = stopped_path(tmp_path, "orders", "sh-0123456789ab")
    marker.parent.mkdir(parents=True)
    marker.touch()
    removals.failing = True  # Elasticsearch away: asked again next pass
    kept.step(SPEC, deployed=True)
    assert records.shadows["out"].phase is ShadowPhase.ENDING and checkpoint.exists()
    removals.failing = False
    kept.step(SPEC, deployed=True)
    assert records.shadows["out"].phase is ShadowPhase.ENDED and not checkpoint.exists()
    [route] = removals.routes
    assert route.shadow == "sh-0123456789ab" and route.output.sink.shadow
    assert route.output.filter == "n > 2"  # the shadow's version, into its own targets


def test_with_no_router_deployed_an_ending_shadows_targets_go_at_once(tmp_path: Path) -> None:
    kept, records, removals = upkeep(tmp_path, shadow(ShadowPhase.ENDING))
    kept.step(SPEC, deployed=False)
    assert records.shadows["out"].phase is ShadowPhase.ENDED and len(removals.routes) == 1
