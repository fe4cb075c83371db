"""What owners see of rewinds, without the stack: the stream page's recovery section and its
routes (restore points, a rewind's plan confirmed before it starts, its progress in the page's
status), and control's rewind metrics. The routes, `Rewinds`, the models and the checkpoint
reading are the real ones; only the registry (a store in memory) and Kafka's positions are
fakes, and checkpoints are files in a temporary directory. The page's script in a browser is
tests/control/test_rewind_browser.py (on the stack)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, generate_latest

from keystone.contracts import metrics as names
from keystone.contracts.checkpoints import Offsets, checkpoint_dir
from keystone.contracts.errors import NotFound, Unavailable
from keystone.contracts.fronting import Active
from keystone.contracts.names import ARCHIVE_QUERY, fronting_topic
from keystone.contracts.recovery import (
    OPERATIONS,
    Backfill,
    Operation,
    Redrive,
    RestorePoint,
    Rewind,
    RewindPhase,
    check_free,
)
from keystone.contracts.registry import RouterState, Unreadable, hash_key
from keystone.contracts.settings import Settings
from keystone.contracts.shadows import Shadow
from keystone.contracts.spec import StreamSpec, load_spec
from keystone.control import ui
from keystone.control.app import FleetCollector, create_app
from keystone.control.backfills import Backfills
from keystone.control.plane import Plane
from keystone.control.positions import Extent
from keystone.control.rewinds import Rewinds
from keystone.control.shadows import Shadows
from keystone.control.silences import Silences
from keystone.control.store import Planned
from keystone.control.streams import Streams
from keystone.control.tenancy import Authenticator

NOW = 1_790_000_000.0
STREAM, OWNER, TOKEN = "recover", "team-a", "ko_team-a-token"
EARLIEST, END = {0: 0, 1: 0}, {0: 500, 1: 400}


def spec(name: str = STREAM, owner: str = OWNER) -> StreamSpec:
    outputs = [
        {"name": "clicks", "sink": {"type": "kafka"}},
        {"name": "search", "sink": {"type": "elasticsearch"}},
    ]
    return load_spec({"name": name, "owner": owner, "partitions": 2, "outputs": outputs})


def point(batch: int, at: float, offsets: Offsets) -> RestorePoint:
    return RestorePoint(
        id=RestorePoint.make_id(0, batch),
        time=at,
        generation=0,
        batch=batch,
        query="q-0",
        offsets=offsets,
    )


def rewind(
    output: str, start: Offsets, until: Offsets, phase: RewindPhase = RewindPhase.REPLAYING
) -> Rewind:
    return Rewind(
        id="rw-0123456789ab",
        output=output,
        generation=1,
        start=start,
        until=until,
        rate=100,
        phase=phase,
        requested_at=NOW - 60,
        by=OWNER,
        target="restore point 0-3",
        restore_point="0-3",
        total=sum(until[p] - start[p] for p in until),
        finished_at=NOW if phase is RewindPhase.CAUGHT_UP else 0.0,
    )


def commit(settings: Settings, stream: str, output: str, generation: int, offsets: Offsets) -> None:
    """A batch the output's checkpoint committed, as Spark's offset and commit logs hold it."""
    path = checkpoint_dir(settings, stream, output, generation)
    (path / "offsets").mkdir(parents=True)
    (path / "commits").mkdir()
    by_topic = {fronting_topic(stream): {str(p): o for p, o in offsets.items()}}
    (path / "offsets" / "4").write_text('v1\n{"batchWatermarkMs":0}\n' + json.dumps(by_topic))
    (path / "commits" / "4").write_text('v1\n{"nextBatchWatermarkMs":0}')


@dataclass
class FakeRecovery:
    """`control.store.RecoveryRecords`' guarded start and update, in memory: the same checks
    (`contracts.recovery.check_free`), without Redis."""

    store: FakeStore

    def start(
        self,
        record: Operation,
        planned: Planned,
        audit: dict[str, Any],
        keeps: Callable[[RestorePoint], bool] | None = None,
    ) -> None:
        stream = planned.stream
        kind, where = type(record), getattr(record, "output", stream)
        others = [self.store.operations(OPERATIONS[k], stream).get(where) for k in kind.excludes]
        current = self.store.operations(kind, stream).get(where)
        check_free(kind, stream, where, [current, *others])
        self.store.records(kind, stream)[where] = record
        if keeps is not None:
            kept = self.store.points.get((stream, where), [])
            self.store.points[(stream, where)] = [p for p in kept if keeps(p)]
        self.store.audits.append(audit)

    def update(
        self,
        stream: str,
        record: Operation,
        holds: Callable[[Any], bool] = lambda _: True,
        audit: dict[str, Any] | None = None,
    ) -> bool:
        records = self.store.records(type(record), stream)
        where = getattr(record, "output", stream)
        current = records.get(where)
        if current is None or current.id != record.id or not holds(current):
            return False
        records[where] = record
        if audit is not None:
            self.store.audits.append(audit)
        return True


@dataclass
class FakeSessions:
    tokens: dict[str, str] = field(default_factory=dict)  # session -> token digest

    def token(self, session: str) -> str | None:
        return self.tokens.get(session)


@dataclass
class FakePrincipals:
    owners: dict[str, str] = field(default_factory=dict)  # token digest -> owner

    def owner_by_digest(self, digest: str) -> str | None:
        return self.owners.get(digest)


class FakeSpecs:
    """The claims a change of a spec is checked against: none here."""

    def retired(self) -> dict[str, str]:
        return {}

    def topic_owners(self) -> dict[str, str]:
        return {}

    def topic_names(self) -> dict[str, str]:
        return {}


@dataclass
class FakeStore:
    """`control.store.Store`'s reads and the repositories these views use, in memory."""

    stream_specs: dict[str, StreamSpec] = field(default_factory=dict)
    unreadable: list[Unreadable] = field(default_factory=list)
    rewind_records: dict[str, dict[str, Rewind]] = field(default_factory=dict)
    points: dict[tuple[str, str], list[RestorePoint]] = field(default_factory=dict)
    sessions: FakeSessions = field(default_factory=FakeSessions)
    principals: FakePrincipals = field(default_factory=FakePrincipals)
    audits: list[dict[str, Any]] = field(default_factory=list)
    broken: set[str] = field(default_factory=set)  # streams whose rewinds do not read
    backfill_records: dict[str, dict[str, Backfill]] = field(default_factory=dict)
    shadow_records: dict[str, dict[str, Shadow]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.recovery = FakeRecovery(self)
        self.specs = FakeSpecs()

    def apps(self) -> list[Any]:
        return []

    def get_stream(self, name: str) -> StreamSpec:
        if name not in self.stream_specs:
            raise NotFound(f"no stream {name!r}")
        return self.stream_specs[name]

    def streams(self) -> list[StreamSpec]:
        return list(self.stream_specs.values())

    def read_streams(self) -> tuple[list[StreamSpec], list[Unreadable]]:
        return list(self.stream_specs.values()), list(self.unreadable)

    def router_state(self, stream: str) -> RouterState | None:
        return None

    def router_states(self) -> dict[str, RouterState]:
        return {}

    def fronting(self, settings: Settings) -> Active:
        return Active(cluster=settings.fronting_clusters[0])

    def fronting_switches(self) -> dict[tuple[str, str, str], int]:
        return {}

    def records(self, kind: type[Operation], stream: str) -> dict[str, Any]:
        """The latest operations of a kind by output, to change (a redrive: none, through the
        API: tests/router/test_redrive.py)."""
        return self._held().get(kind, {}).setdefault(stream, {})

    def operations(self, kind: type[Operation], stream: str) -> dict[str, Any]:
        if kind is Rewind and stream in self.broken:
            raise Unavailable(f"the rewinds of {stream} do not read")
        return dict(self._held().get(kind, {}).get(stream, {}))

    def _held(self) -> dict[type[Operation], dict[str, dict[str, Any]]]:
        return {
            Rewind: self.rewind_records,
            Backfill: self.backfill_records,
            Shadow: self.shadow_records,
        }

    def rewinds(self, stream: str) -> dict[str, Rewind]:
        return self.operations(Rewind, stream)

    def backfills(self, stream: str) -> dict[str, Backfill]:
        return self.operations(Backfill, stream)

    def redrive(self, stream: str) -> Redrive | None:
        return None

    def restore_points(self, stream: str, output: str) -> list[RestorePoint]:
        return sorted(self.points.get((stream, output), []), key=lambda p: -p.time)


@dataclass
class FakePositions:
    """Kafka's answers: every topic holds offsets EARLIEST to END; since any time, the last
    100 records of each partition."""

    def extent(self, topic: str) -> Extent:
        return Extent(dict(EARLIEST), dict(END))

    def at_time(self, topic: str, epoch_ms: int) -> Offsets:
        return {p: max(0, end - 100) for p, end in END.items()}

    def first_timestamp(self, topic: str, offsets: Offsets) -> float | None:
        return NOW - 3600


@dataclass
class World:
    settings: Settings
    store: FakeStore
    plane: Plane
    client: TestClient

    def rewind(self, output: str, body: dict[str, Any], **headers: str) -> Any:
        return self.client.post(
            f"/ui/streams/{STREAM}/outputs/{output}/rewind",
            json=body,
            headers={"Accept": "application/json", **headers},
        )

    def status(self) -> dict[str, dict[str, Any]]:
        answer = self.client.get(f"/ui/streams/{STREAM}/status")
        assert answer.status_code == 200, answer.text
        return {o["name"]: o for o in answer.json()["outputs"]}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    # Prometheus and Alertmanager on a port nobody listens on: the status says its figures
    # and alerts are missing, the page that its silences are.
    settings = Settings(
        state_dir=tmp_path,
        admin_token="ka_admin-token",
        prometheus_url="http://127.0.0.1:9",
        alertmanager_url="http://127.0.0.1:9",
    )
    store = FakeStore(stream_specs={STREAM: spec(), "others": spec("others", "team-b")})
    store.sessions.tokens = {"s-team-a": hash_key(TOKEN), "s-team-b": hash_key("ko_b")}
    store.principals.owners = {hash_key(TOKEN): OWNER, hash_key("ko_b"): "team-b"}
    for output in ("clicks", "search"):
        store.points[(STREAM, output)] = [
            point(3, NOW - 600, {0: 100, 1: 80}),
            point(7, NOW - 300, {0: 300, 1: 240}),
            point(5, NOW - 450, {0: 200, 1: 160}),
        ]
    streams = Streams(settings, store)  # type: ignore[arg-type]
    plane = Plane(
        settings=settings,
        store=store,  # type: ignore[arg-type]
        auth=Authenticator(settings, store),  # type: ignore[arg-type]
        streams=streams,
        accounts=None,  # type: ignore[arg-type]
        rewinds=Rewinds(settings, store, streams, FakePositions(), clock=lambda: NOW),  # type: ignore[arg-type]
        backfills=Backfills(settings, store, streams, FakePositions(), clock=lambda: NOW),  # type: ignore[arg-type]
        dead_letters=None,  # type: ignore[arg-type]
        redrives=None,  # type: ignore[arg-type]
        fleet=None,  # type: ignore[arg-type]
        fronting=None,  # type: ignore[arg-type]
        receivers=None,  # type: ignore[arg-type]
        silences=Silences(settings, streams),
        shadows=Shadows(settings, store, streams, FakePositions(), clock=lambda: NOW),  # type: ignore[arg-type]
    )
    app = create_app(settings)
    app.state.plane = plane  # the lifespan, which connects to Redis, is not run
    client = TestClient(app)
    client.cookies.set(ui.COOKIE, "s-team-a")
    yield World(settings, store, plane, client)
    client.close()


# The page and its routes


def test_the_stream_page_has_each_outputs_recovery_and_the_rewind_dialog(world: World) -> None:
    answer = world.client.get(f"/ui/streams/{STREAM}", headers={"Accept": "text/html"})
    assert answer.status_code == 200
    page = answer.text
    for output in ("clicks", "search"):
        assert f'<details class="card recovery" id="recovery-{output}"' in page
        assert f'<form class="rewind-form" data-output="{output}">' in page
        assert f'id="rewind-{output}-to" name="to" type="datetime-local"' in page
    assert '<dialog id="rewind-dialog">' in page and 'value="confirm"' in page
    assert "at most 5000 events/s" in page  # the stream's recovery rate
    assert '<script src="/ui/static/stream.js">' in page
    # Alertmanager does not answer: the page says its silences are unavailable, and still shows.
    assert 'id="silences-error">Silences unavailable: Alertmanager did not answer' in page
    script = world.client.get("/ui/static/stream.js").text
    assert "dry_run: true" in script and "showModal" in script


def test_restore_points_are_listed_newest_first(world: World) -> None:
    answer = world.client.get(f"/ui/streams/{STREAM}/outputs/search/restore-points")
    assert answer.status_code == 200
    points = answer.json()
    assert [p["id"] for p in points] == ["0-7", "0-5", "0-3"]
    assert points[0]["offsets"] == {"0": 300, "1": 240}
    assert points[0]["time"].endswith("Z")  # UTC


def test_a_dry_run_says_what_the_sink_will_do_and_moves_nothing(world: World) -> None:
    answer = world.rewind("search", {"restore_point": "0-5", "dry_run": True})
    assert answer.status_code == 200, answer.text
    plan = answer.json()
    assert plan["state"] == "planned" and plan["restore_point"] == "0-5"
    assert plan["start"] == {"0": 200, "1": 160} and plan["until"] == {"0": 500, "1": 400}
    assert plan["events"] == 300 + 240
    assert (plan["rate"], plan["eta_seconds"]) == (5000, round(540 / 5000, 1))
    assert plan["sink"]["kind"] == "idempotent"
    assert "replacing the earlier ones in place" in plan["sink"]["effect"]
    assert world.store.rewind_records == {} and world.store.audits == []

    kafka = world.rewind(
        "clicks", {"restore_point": "0-5", "max_events_per_second": 50, "dry_run": True}
    ).json()
    assert kafka["sink"]["kind"] == "append-only"
    assert kafka["sink"]["records_in_period"] == 200  # the last 100 of each partition
    assert "ks_replay=" in kafka["sink"]["effect"]
    assert (kafka["rate"], kafka["eta_seconds"]) == (50, round(540 / 50, 1))
    assert world.store.rewind_records == {}


def test_a_confirmed_rewind_starts_and_its_progress_is_in_the_status(world: World) -> None:
    assert "rewind" not in world.status()["search"]  # none yet: left out, as the API does
    answer = world.rewind("search", {"restore_point": "0-5"})
    assert answer.status_code == 202, answer.text
    started = answer.json()
    assert started["state"] == "replaying"
    stored = world.store.rewind_records[STREAM]["search"]
    assert stored.id == started["id"] and stored.start == {0: 200, 1: 160}
    [entry] = world.store.audits
    assert entry["action"] == "output.rewind" and entry["who"] == OWNER
    assert [p.id for p in world.store.points[(STREAM, "search")]] == ["0-3", "0-5"]

    status = world.status()
    assert "rewind" not in status["clicks"]
    progress = status["search"]["rewind"]
    assert (progress["id"], progress["state"]) == (started["id"], "replaying")
    assert (progress["replayed"], progress["events"]) == (0, 540)  # its checkpoint not begun
    commit(world.settings, STREAM, "search", 1, {0: 350, 1: 200})
    progress = world.status()["search"]["rewind"]
    assert progress["replayed"] == 150 + 40
    assert progress["committed"] == {"0": 350, "1": 200}
    assert progress["eta_seconds"] > 0

    again = world.rewind("search", {"restore_point": "0-3", "dry_run": True})
    assert again.status_code == 409
    assert "one rewind per output at a time" in again.json()["message"]


def test_a_caught_up_rewind_shows_as_done(world: World) -> None:
    world.store.rewind_records[STREAM] = {
        "clicks": rewind("clicks", {0: 10, 1: 10}, {0: 30, 1: 20}, RewindPhase.CAUGHT_UP)
    }
    progress = world.status()["clicks"]["rewind"]
    assert progress["state"] == "caught_up"
    assert progress["replayed"] == progress["events"] == 30
    assert progress["eta_seconds"] is None and progress["finished_at"].endswith("Z")


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"restore_point": "0-1", "dry_run": True}, 410, "no longer exists"),
        ({"restore_point": "0-3", "offsets": {"0": 1}}, 422, "give exactly one of"),
        ({"offsets": {"0": 1, "7": 2}, "dry_run": True}, 422, "no partition 7"),
        ({"to": "2099-01-01T00:00:00Z", "dry_run": True}, 422, "in the future"),
    ],
)
def test_what_cannot_be_done_is_said_and_moves_nothing(
    world: World, body: dict, status: int, words: str
) -> None:
    answer = world.rewind("search", body)
    assert answer.status_code == status
    error = answer.json()
    said = " ".join([error["message"], *(p["message"] for p in error.get("problems", []))])
    assert words in said
    assert world.store.rewind_records == {}


def test_a_rewind_from_another_site_or_of_another_owners_output_is_refused(world: World) -> None:
    answer = world.rewind("search", {"restore_point": "0-5"}, Origin="http://elsewhere.example")
    assert answer.status_code == 403
    assert world.client.get("/ui/streams/others/outputs/clicks/restore-points").status_code == 404
    other = world.client.post(
        "/ui/streams/others/outputs/clicks/rewind",
        json={"restore_point": "0-5"},
        headers={"Accept": "application/json"},
    )
    assert other.status_code == 404
    assert world.client.get(f"/ui/streams/{STREAM}/outputs/nope/restore-points").status_code == 404
    world.client.cookies.clear()
    signed_out = world.client.get(
        f"/ui/streams/{STREAM}/outputs/search/restore-points", follow_redirects=False
    )
    assert signed_out.status_code == 303 and signed_out.headers["location"] == "/ui/login"
    assert world.store.rewind_records == {}


# Backfills from the page


def backfill_range(**extra: object) -> dict[str, object]:
    hours = (NOW - 2 * 3600, NOW - 3600)
    span = [datetime.fromtimestamp(t, UTC).isoformat() for t in hours]
    return {"from": span[0], "to": span[1], **extra}


def test_each_output_has_a_backfill_form_while_its_stream_keeps_an_archive(world: World) -> None:
    page = world.client.get(f"/ui/streams/{STREAM}", headers={"Accept": "text/html"}).text
    for output in ("clicks", "search"):
        assert f'<form class="backfill-form" data-output="{output}">' in page
        assert f'id="backfill-{output}-from" name="from" type="datetime-local"' in page
    assert '<dialog id="backfill-dialog">' in page
    assert 'id="output-_archive" data-output="_archive"' in page  # counted like an output
    assert '<details class="card" id="dead-letters-box">' in page and "data-redrive-all" in page
    world.store.stream_specs[STREAM] = load_spec(
        {**spec().model_dump(by_alias=True), "archive": {"enabled": False}}
    )
    page = world.client.get(f"/ui/streams/{STREAM}", headers={"Accept": "text/html"}).text
    assert "backfill-form" not in page and "output-_archive" not in page


def test_a_backfill_is_planned_started_shown_and_cancelled_from_the_page(world: World) -> None:
    commit(world.settings, STREAM, ARCHIVE_QUERY, 0, END)  # the archive has written it all
    path = f"/ui/streams/{STREAM}/outputs/search/backfill"
    accept = {"Accept": "application/json"}
    plan = world.client.post(path, json=backfill_range(dry_run=True), headers=accept)
    assert plan.status_code == 200, plan.text
    assert plan.json()["state"] == "planned" and plan.json()["sink"]["kind"] == "idempotent"
    assert world.store.backfill_records == {}
    started = world.client.post(path, json=backfill_range(max_events_per_second=10), headers=accept)
    assert started.status_code == 202, started.text
    shown = world.status()["search"]["backfill"]
    assert (shown["id"], shown["state"], shown["rate"]) == (started.json()["id"], "running", 10)
    assert shown["from"].endswith("Z") and "backfill" not in world.status()["clicks"]
    cancelled = world.client.delete(path, headers=accept)
    assert cancelled.status_code == 202 and cancelled.json()["state"] == "cancelling"
    assert [a["action"] for a in world.store.audits] == [
        "output.backfill",
        "output.backfill.cancel",
    ]
    elsewhere = world.client.post(
        path, json=backfill_range(), headers={**accept, "Origin": "http://elsewhere.example"}
    )
    assert elsewhere.status_code == 403


def test_the_stream_dashboards_data_carries_its_rewinds_to_mark(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple[str, int]] = []
    monkeypatch.setattr(ui, "panel_data", lambda settings, panels, minutes: {"panels": []})
    monkeypatch.setattr(ui, "stream_alerts", lambda settings, streams: [])

    def marks(settings: Settings, stream: str, minutes: int) -> list[dict[str, Any]]:
        asked.append((stream, minutes))
        return [{"time": NOW - 60, "output": "search"}]

    monkeypatch.setattr(ui, "rewind_marks", marks)
    data = world.client.get(f"/ui/streams/{STREAM}/dashboard/data", params={"minutes": 60})
    assert data.json()["rewinds"] == [{"time": NOW - 60, "output": "search"}]
    assert asked == [(STREAM, 60)]
    assert world.client.get("/ui/dashboard/data").json()["rewinds"] == []  # the fleet's: none


# Control's metrics


def test_the_rewind_metrics_follow_each_outputs_latest_rewind(world: World) -> None:
    store, settings = world.store, world.settings
    store.stream_specs["third"] = spec("third")
    store.stream_specs["fourth"] = spec("fourth")
    store.rewind_records = {
        # Replaying, its checkpoint 190 of 540 events in.
        STREAM: {
            "search": rewind("search", {0: 200, 1: 160}, {0: 500, 1: 400}),
            "gone": rewind("gone", {0: 0}, {0: 5}),  # an output the spec no longer has
        },
        # Caught up, its checkpoint already removed: nothing left.
        "third": {"clicks": rewind("clicks", {0: 0, 1: 0}, {0: 9, 1: 1}, RewindPhase.CAUGHT_UP)},
        # Replaying, its new checkpoint not begun (or unreadable): everything left.
        "fourth": {"clicks": rewind("clicks", {0: 0, 1: 0}, {0: 70, 1: 30})},
    }
    commit(settings, STREAM, "search", 1, {0: 350, 1: 200})
    path = checkpoint_dir(settings, "fourth", "clicks", 1)
    (path / "commits").mkdir(parents=True)
    (path / "commits" / "2").write_text("v1")  # committed, but its offsets are not there
    store.broken = {"others"}  # one stream whose rewinds cannot be read: the others still count
    store.rewind_records["others"] = {"clicks": rewind("clicks", {0: 0}, {0: 1})}

    registry = CollectorRegistry()
    registry.register(FleetCollector(SimpleNamespace(state=SimpleNamespace(plane=world.plane))))  # type: ignore[arg-type]

    def sample(name: str, stream: str, output: str) -> float | None:
        return registry.get_sample_value(name, {"stream": stream, "output": output})

    assert sample(names.REWIND_REMAINING, STREAM, "search") == 540 - 190
    assert sample(names.REWIND_STARTED, STREAM, "search") == NOW - 60
    assert sample(names.REWIND_REMAINING, "third", "clicks") == 0
    assert sample(names.REWIND_REMAINING, "fourth", "clicks") == 100
    assert sample(names.REWIND_STARTED, "fourth", "clicks") == NOW - 60
    for stream, output in ((STREAM, "gone"), (STREAM, "clicks"), ("others", "clicks")):
        assert sample(names.REWIND_REMAINING, stream, output) is None
        assert sample(names.REWIND_STARTED, stream, output) is None
    text = generate_latest(registry).decode()
    assert f"# TYPE {names.REWIND_REMAINING} gauge" in text
    assert f"# TYPE {names.CONTROL_ROUTERS} gauge" in text  # the fleet's figures as before

    store.rewind_records = {}
    registry_without = CollectorRegistry()
    registry_without.register(
        FleetCollector(SimpleNamespace(state=SimpleNamespace(plane=world.plane)))  # type: ignore[arg-type]
    )
    assert f"{names.REWIND_REMAINING}{{" not in generate_latest(registry_without).decode()


def test_a_shadow_is_started_shown_and_dropped_from_the_page(world: World) -> None:
    """The page's form holds the output's JSON to change; the shadow started from it is in the
    status the page refreshes from, and ends when dropped."""
    page = world.client.get(f"/ui/streams/{STREAM}", headers={"Accept": "text/html"}).text
    for output in ("clicks", "search"):
        assert f'<form class="shadow-form" data-output="{output}">' in page
        assert f'<details class="card shadow" id="shadow-{output}" data-output="{output}">' in page
    assert '"name": "search"' in page  # the form starts from the output as it is
    path, accept = f"/ui/streams/{STREAM}/outputs/search/shadow", {"Accept": "application/json"}
    live = world.store.stream_specs[STREAM].output("search")
    assert live is not None
    changed = {**live.model_dump(mode="json"), "filter": "country = 'US'"}
    same = world.client.post(path, json={"output": live.model_dump(mode="json")}, headers=accept)
    assert same.status_code == 422 and "nothing to compare" in same.text
    started = world.client.post(
        path, json={"output": changed, "expires_in": "2 hours"}, headers=accept
    )
    assert started.status_code == 202, started.text
    shown = world.status()["search"]["shadow"]
    assert (shown["id"], shown["state"], shown["version"]["filter"]) == (
        started.json()["id"],
        "running",
        "country = 'US'",
    )
    assert shown["expires_at"].startswith("20") and shown["start"] == {
        str(p): o for p, o in END.items()
    }  # no commit of the output's yet: where the topic ends
    assert "shadow" not in world.status()["clicks"]
    again = world.client.post(path, json={"output": changed}, headers=accept)
    assert again.status_code == 409 and "one shadow per output" in again.text
    dropped = world.client.delete(path, headers=accept)
    assert dropped.status_code == 202 and (dropped.json()["state"], dropped.json()["end"]) == (
        "ending",
        "dropped",
    )
    assert [a["action"] for a in world.store.audits] == ["output.shadow", "output.shadow.drop"]
