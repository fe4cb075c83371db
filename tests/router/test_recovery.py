"""Rewinds and backfills end to end on the real stack (issues 30 and 31): a stream with one
output per sink type to rewind, and one per sink type (but Keystone) to backfill, receives known
events over three hours of ingest time (stamped by the test); a "bad deploy" (a wrong
projection, and for the backfilled outputs a wrong filter too) runs during the middle hour and
is fixed; half the bad deploy's events are written to the standby fronting cluster (west), as
in a failover. Each rewound output goes back to its restore point from before the bad deploy,
on both clusters; each
backfilled output routes the middle hour again from the stream's archive. Afterwards each sink
holds exactly what the fixed spec gives, computed independently with the Python evaluator:
Hive and Elasticsearch each event once, Kafka and Keystone each event with its replayed copy
flagged `ks_replay`. Then a rewind whose router is killed halfway, and a backfill whose
application is killed halfway, lose nothing; a backfill outlives a restart of control; and
requests that cannot be carried out move nothing. A few of the bad hour's events hold text the
fixed filter reads and cannot (a lone surrogate): the backfill counts them, takes them out of the
sinks and leaves them in the archive, dead-lettering none.

The tests share one stream and run in order of need: each checks what it needs first.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from unittest.mock import ANY

import pytest

from keystone.contracts import envelope, fronting, kafka_clients
from keystone.contracts.elasticsearch import Connection
from keystone.contracts.processes import PidFile, stop
from keystone.contracts.recovery import Backfill
from keystone.control.launcher import Deployment
from keystone.ingest_proxy.client import DirectProducer
from keystone.router.lang.evaluate import project
from keystone.router.lang.parser import parse_projection
from keystone.router.sinks.elasticsearch.readback import search_documents
from keystone.router.topics import read_topic
from tests.support.api import Api, owner
from tests.support.stack import Stack, checked
from tests.support.tables import Tables
from tests.support.waiting import eventually

STREAM, TARGET, OWNER, APP = "rw_main", "rw_copy", "team-rewind", "rw_app"
GOOD = ["n", "kind", "user.id as uid"]
BAD = ["n", "kind as wrong"]  # the bad deploy's projection
# The backfilled outputs' filters, good or bad: the good one reads `note` too.
FILTERS = {True: "kind = 'click' or note = 'never'", False: "kind = 'view'"}
BATCH = 200  # events per phase, each phase an hour of ingest time
WEST = BATCH // 2  # of the bad deploy's, written to the standby fronting cluster
UNREADABLE = 4  # the bad hour's views whose `note` the fixed filter cannot read
HOUR_MS = 3_600_000


def outputs(good: bool) -> list[dict]:
    """One output per sink type to rewind, one per sink type (but Keystone) to backfill, each
    with the good or the bad projection (and filter), from the topic's start."""
    realtime = {"mode": "realtime", "trigger": "5 seconds"}
    batches = {"mode": "microbatch", "trigger": "5 seconds"}
    sinks = {
        "clicks": ({"type": "kafka"}, realtime),
        "copy": ({"type": "keystone", "stream": TARGET}, realtime),
        "search": ({"type": "elasticsearch"}, realtime),
        "warehouse": ({"type": "hive"}, batches),
    }
    backfilled = {
        "bf_clicks": ({"type": "kafka"}, batches),
        "bf_search": ({"type": "elasticsearch"}, batches),
        "bf_warehouse": ({"type": "hive"}, batches),
    }
    projection = GOOD if good else BAD
    every = [
        {"name": name, "projection": projection, "sink": sink, "delivery": delivery}
        for name, (sink, delivery) in sinks.items()
    ]
    every += [
        {"name": n, "projection": projection, "filter": FILTERS[good], "sink": s, "delivery": d}
        for n, (s, d) in backfilled.items()
    ]
    return [output | {"start": "earliest"} for output in every]


def event(n: int) -> dict:
    return {"n": n, "kind": ("click", "view")[n % 2], "user": {"id": n % 13}}


@dataclass
class Rewound:
    stack: Stack
    api: Api
    tables: Tables
    producer: DirectProducer
    west: DirectProducer  # the standby fronting cluster's
    sent: dict[str, dict] = field(default_factory=dict)  # guid -> event
    before_bad: dict[str, str] = field(default_factory=dict)  # output -> its good restore point
    # The three hours of ingest time the phases are stamped with, the bad deploy's the middle.
    first_hour: int = field(
        default_factory=lambda: (int(time.time() * 1000) // HOUR_MS - 3) * HOUR_MS
    )
    hour_of: dict[str, int] = field(default_factory=dict)  # guid -> its phase's hour (0-2)
    on_west: set[str] = field(default_factory=set)  # written to the standby fronting cluster
    expired: set[str] = field(default_factory=set)  # ingested past the archive's retention
    unreadable: set[str] = field(default_factory=set)  # their `note` holds a lone surrogate

    def send(self, numbers: range, hour: int, west: bool = False) -> None:
        events = [event(n) for n in numbers]
        at = self.first_hour + hour * HOUR_MS + numbers.start  # within the hour
        guids = (self.west if west else self.producer).send(STREAM, events, at=at).guids
        assert len(guids) == len(events)
        self.sent.update(zip(guids, events, strict=True))
        self.hour_of.update(dict.fromkeys(guids, hour))
        if west:
            self.on_west.update(guids)

    def send_unreadable(self, count: int) -> None:
        """Views of the bad hour whose `note` holds a lone surrogate: read by nothing but the
        backfilled outputs' fixed filter, which cannot read it."""
        events = [
            {"n": -n, "kind": "view", "user": {"id": 1}, "note": "\ud800"} for n in range(count)
        ]
        at = self.first_hour + HOUR_MS + BATCH
        guids = self.producer.send(STREAM, events, at=at).guids
        self.sent.update(zip(guids, events, strict=True))
        self.hour_of.update(dict.fromkeys(guids, 1))
        self.unreadable.update(guids)

    def send_expired(self, count: int) -> None:
        """Views ingested three days ago (past the archive's two days): the bad filter's kind,
        so the backfilled outputs' good filter never had them."""
        events = [{"n": n, "kind": "view", "user": {"id": 1}} for n in range(count)]
        at = int(time.time() * 1000) - 3 * 86_400_000
        guids = self.producer.send(STREAM, events, at=at).guids
        self.sent.update(zip(guids, events, strict=True))
        self.hour_of.update(dict.fromkeys(guids, -72))
        self.expired.update(guids)

    def archive(self) -> list[dict]:
        return self.tables.read(f"keystone.{STREAM}__archive")

    def spec(self, good: bool, **extra: object) -> dict:
        return {
            "name": STREAM,
            "owner": OWNER,
            "partitions": 2,
            "producers": [APP],
            "outputs": outputs(good),
            "archive": {"trigger": "5 seconds", "keep_days": 2},
            **extra,
        }

    def redeploy(self, good: bool) -> None:
        """The spec changed, once the changed router runs: events sent before could be read
        by the old one (a realtime output delivers them at once) as it stops."""
        before = self.router_pid()
        self.api.ok("PUT", f"/v1/streams/{STREAM}", self.spec(good))
        eventually(
            "the redeployed router to run",
            lambda: self.router_pid() not in (None, before),
            timeout=180,
        )

    def router_pid(self) -> int | None:
        deployed = Deployment.load(self.stack.settings, STREAM)
        return deployed.pid if deployed is not None and deployed.alive() else None

    def good(self, guid: str) -> dict:
        return project(parse_projection(GOOD), self.sent[guid], {"guid": guid})

    # Each sink read back: every copy of every record, by guid.

    def kafka(self, output: str = "clicks") -> list[tuple[str, dict, dict]]:
        return [
            (m.key().decode(), json.loads(m.value()), _headers(m))
            for m in read_topic(self.stack.kafka(), f"{STREAM}.{output}")
        ]

    def keystone(self) -> list[tuple[str, dict, dict]]:
        found = []
        for m in read_topic(self.stack.kafka(), f"keystone.{TARGET}"):
            headers = _headers(m)
            found.append((headers[envelope.GUID], json.loads(m.value()), headers))
        return found

    def search(self, output: str = "search") -> list[tuple[str, dict]]:
        return search_documents(
            Connection.of(self.stack.settings), f"{STREAM}-{output}-*", source=True
        )

    def warehouse(self, output: str = "warehouse") -> list[tuple[str, dict]]:
        rows = self.tables.read(f"keystone.{STREAM}__{output}")
        return [(r["guid"], json.loads(r["record"])) for r in rows]

    def kept(self, good: bool, hours: tuple[int, ...] = (0, 1, 2)) -> set[str]:
        """The events of `hours` a backfilled output's good (or bad) filter keeps (the good
        one none it cannot read)."""
        wanted = FILTERS[good].split("'")[1]
        kept = {g for g, e in self.sent.items() if e["kind"] == wanted and self.hour_of[g] in hours}
        return kept - self.unreadable if good else kept

    def holds_everything(self) -> bool:
        """Every event sent is in every output (in some form); each backfilled output has the
        events its filter kept, as it was when they were sent."""
        sent = set(self.sent)
        delivered = self.kept(True, (0, 2)) | self.kept(False, (1,))
        return (
            sent <= {g for g, _, _ in self.kafka()}
            and sent <= {g for g, _, _ in self.keystone()}
            and sent <= {g for g, _ in self.search()}
            and sent <= {g for g, _ in self.warehouse()}
            and delivered <= {g for g, _, _ in self.kafka("bf_clicks")}
            and delivered <= {g for g, _ in self.search("bf_search")}
            and delivered <= {g for g, _ in self.warehouse("bf_warehouse")}
        )

    def points(self, output: str) -> list[dict]:
        return self.api.ok("GET", f"/v1/streams/{STREAM}/outputs/{output}/restore-points")

    def point(self, output: str, point_id: str) -> dict:
        """One restore point, its offsets keyed by partition number."""
        found = next(p for p in self.points(output) if p["id"] == point_id)
        return found | {"offsets": {int(p): o for p, o in found["offsets"].items()}}

    def rewind(self, output: str, **body: object) -> dict:
        return self.api.ok("POST", f"/v1/streams/{STREAM}/outputs/{output}/rewind", body)

    def state(self, output: str) -> dict:
        return self.api.ok("GET", f"/v1/streams/{STREAM}/outputs/{output}/rewind")

    def replaying(self, output: str) -> bool:
        """Whether the output's latest rewind replays (none yet: it does not)."""
        answer = self.api.call("GET", f"/v1/streams/{STREAM}/outputs/{output}/rewind")
        if answer.status_code == 404:
            return False
        assert answer.status_code == 200, answer.text
        return answer.json()["state"] == "replaying"


def _headers(message) -> dict[str, str]:
    return {k: v.decode() for k, v in message.headers() or []}


def _delivered_all(points: list[dict], count: int) -> dict | None:
    """The newest restore point at or after `count` events (both partitions together)."""
    for point in points:
        if sum(point["offsets"].values()) >= count:
            return point
    return None


@pytest.fixture(scope="module")
def rewound(stack: Stack, admin: Api) -> Iterator[Rewound]:
    team = owner(admin, OWNER)
    team.ok("POST", "/v1/apps", {"name": APP})
    team.ok("POST", "/v1/streams", {"name": TARGET, "owner": OWNER, "partitions": 2})
    west = kafka_clients.librdkafka(
        fronting.cluster(stack.settings, "west").connect(stack.settings)
    )
    handle = Rewound(
        stack, team, Tables(stack), DirectProducer(stack.kafka(), APP), DirectProducer(west, APP)
    )
    try:
        team.ok("POST", "/v1/streams", handle.spec(good=True))
        handle.send(range(0, BATCH), hour=0)
        handle.send_expired(10)
        eventually("the first events in every output", handle.holds_everything, timeout=240)
        # Archived, they are dropped when the archive next looks (its query's start: the redeploy).
        eventually(
            "the expired events in the archive",
            lambda: handle.expired <= {r["guid"] for r in handle.archive()},
            timeout=120,
        )
        # Each output's restore point once it had them: where the good days end.
        for output in ("clicks", "copy", "search", "warehouse"):
            eventually(
                f"a restore point of {output} after the first events",
                lambda o=output: _delivered_all(handle.points(o), BATCH) is not None,
                timeout=60,
            )
            point = _delivered_all(handle.points(output), BATCH)
            assert point is not None
            handle.before_bad[output] = point["id"]
        # The bad deploy, its events, and the fix (each a redeploy of the router).
        handle.redeploy(good=False)
        handle.send(range(BATCH, 2 * BATCH - WEST), hour=1)
        handle.send(range(2 * BATCH - WEST, 2 * BATCH), hour=1, west=True)  # as in a failover
        handle.send_unreadable(UNREADABLE)

        def wrong_everywhere() -> bool:
            late = {g for g, h in handle.hour_of.items() if h >= 1}
            return late <= {g for g, r in handle.warehouse() if "wrong" in r} and late <= {
                g for g, r, _ in handle.kafka() if "wrong" in r
            }

        eventually("the bad deploy's records", wrong_everywhere, timeout=240)
        eventually("every output to have the bad deploy's events", handle.holds_everything, 120)
        handle.redeploy(good=True)
        handle.send(range(2 * BATCH, 3 * BATCH), hour=2)
        eventually("the fixed deploy's events", handle.holds_everything, timeout=240)
        yield handle
    finally:  # a setup that failed too: its router must not load the tests after it
        handle.tables.close()
        for stream in (STREAM, TARGET):
            team.call("DELETE", f"/v1/streams/{stream}")


def test_rewinding_each_output_past_a_bad_deploy_leaves_each_sink_right(
    rewound: Rewound,
) -> None:
    pid = rewound.router_pid()
    started = {}
    for output, point in rewound.before_bad.items():
        if output == "clicks":
            continue  # from the command line, below
        plan = rewound.rewind(output, restore_point=point, dry_run=True)
        assert plan["state"] == "planned" and plan["restore_point"] == point
        assert plan["events"] >= 2 * BATCH  # the bad deploy's and the fix's, on both clusters
        # West took writes only after the point: all it holds is replayed.
        assert plan["clusters"]["west"] == {"start": {"0": 0, "1": 0}, "until": ANY}
        assert sum(plan["clusters"]["west"]["until"].values()) == WEST
        started[output] = rewound.rewind(output, restore_point=point)["id"]
    # The command line: the restore points newest first, the plan, then the rewind followed
    # by its progress bar until it has caught up.
    cli = ("output", "restore-points", STREAM, "clicks", "--json")
    listed = json.loads(checked(rewound.stack.keystone(*cli)).stdout)
    assert rewound.before_bad["clicks"] in [p["id"] for p in listed]
    assert [p["time"] for p in listed] == sorted((p["time"] for p in listed), reverse=True)
    point = ("output", "rewind", STREAM, "clicks", "--restore-point", rewound.before_bad["clicks"])
    plan = json.loads(checked(rewound.stack.keystone(*point, "--dry-run", "--json")).stdout)
    assert (plan["state"], plan["sink"]["kind"]) == ("planned", "append-only")
    assert not rewound.replaying("clicks")  # a plan moves nothing
    followed = checked(rewound.stack.keystone(*point, "--yes"))
    assert "caught up" in followed.stdout, followed.stdout
    started["clicks"] = rewound.state("clicks")["id"]
    assert started["clicks"] in followed.stdout
    kinds = {o: rewound.state(o)["sink"]["kind"] for o in started}
    assert kinds == {
        "clicks": "append-only",
        "copy": "append-only",
        "search": "idempotent",
        "warehouse": "resettable",
    }
    for output in started:
        eventually(
            f"{output} to catch up",
            lambda o=output: rewound.state(o)["state"] == "caught_up",
            timeout=180,
        )
    assert rewound.router_pid() == pid  # only the outputs moved, never the router

    sent = set(rewound.sent)
    late = {g for g, h in rewound.hour_of.items() if h >= 1}
    # Hive and Elasticsearch: each event once, as the fixed projection makes it.
    eventually("Hive to hold the period once", lambda: len(rewound.warehouse()) == len(sent), 120)
    warehouse = rewound.warehouse()
    assert sorted(g for g, _ in warehouse) == sorted(sent)  # no row twice, none missing
    assert {g: r for g, r in warehouse} == {g: rewound.good(g) for g in sent}
    search = rewound.search()
    assert {g: r for g, r in search} == {g: rewound.good(g) for g in sent}
    assert len(search) == len(sent)
    # Kafka and Keystone: the replayed copies flagged with their rewind, each as it should be.
    for output, records in (("clicks", rewound.kafka()), ("copy", rewound.keystone())):
        replays = [(g, r) for g, r, h in records if h.get(envelope.REPLAY) == started[output]]
        assert {g for g, _ in replays} == late, output  # the whole period after the point
        assert all(r == rewound.good(g) for g, r in replays), output
        firsts = [(g, r) for g, r, h in records if envelope.REPLAY not in h]
        assert {g for g, _ in firsts} == sent, output  # delivered before, without the flag
    audit = rewound.api.audit()
    logged = {e["detail"]["rewind"]: e["detail"] for e in audit if e["action"] == "output.rewind"}
    assert set(started.values()) <= set(logged)
    for output, rewind_id in started.items():  # from where to where
        detail, point = logged[rewind_id], rewound.point(output, rewound.before_bad[output])
        assert detail["output"] == output and detail["restore_point"] == point["id"]
        assert {int(p): o for p, o in detail["to"].items()} == point["offsets"]
        # From where it had got to on home: past the bad deploy's events there and the fix's.
        assert sum(detail["from"].values()) >= sum(point["offsets"].values()) + 2 * BATCH - WEST


def test_a_router_killed_during_a_rewind_loses_nothing(rewound: Rewound) -> None:
    slowly = 25  # events per second: the period's 400 events take 16 s
    ids = {}
    for output in ("warehouse", "search"):
        eventually(
            f"{output} not replaying", lambda o=output: not rewound.replaying(o), timeout=180
        )
        point = rewound.before_bad[output]
        ids[output] = rewound.rewind(output, restore_point=point, max_events_per_second=slowly)
    eventually(
        "the replay to be under way",
        lambda: 0 < rewound.state("warehouse")["replayed"] < 2 * BATCH,
        timeout=90,
    )
    kept = {p["id"] for p in rewound.points("warehouse")}  # up to the rewind's start
    pid = rewound.router_pid()
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)  # the router and its JVM, mid-replay
    for output in ids:
        eventually(
            f"{output} to catch up after the crash",
            lambda o=output: rewound.state(o)["state"] == "caught_up",
            timeout=300,
        )
    assert rewound.router_pid() not in (None, pid)  # the fleet started it again
    assert kept <= {p["id"] for p in rewound.points("warehouse")}  # the restart kept the points
    sent = set(rewound.sent)
    warehouse = rewound.warehouse()
    assert sorted(g for g, _ in warehouse) == sorted(sent)  # no row twice, none missing
    assert dict(warehouse) == {g: rewound.good(g) for g in sent}
    assert dict(rewound.search()) == {g: rewound.good(g) for g in sent}


def test_requests_that_cannot_be_carried_out_move_nothing(rewound: Rewound, admin: Api) -> None:
    path = f"/v1/streams/{STREAM}/outputs/clicks/rewind"
    before = rewound.api.call("GET", path).json()
    stranger = owner(admin, "team-stranger")
    assert stranger.call("POST", path, {"restore_point": "0-0"}).status_code == 404
    nowhere = f"/v1/streams/{STREAM}/outputs/nowhere/rewind"
    assert rewound.api.call("POST", nowhere, {"restore_point": "0-0"}).status_code == 404
    unknown = "/v1/streams/rw_nowhere/outputs/clicks"
    assert (
        rewound.api.call("POST", f"{unknown}/rewind", {"restore_point": "0-0"}).status_code == 404
    )
    assert rewound.api.call("GET", f"{unknown}/restore-points").status_code == 404
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    answer = rewound.api.call("POST", path, {"to": future})
    assert answer.status_code == 422 and "future" in answer.json()["message"]
    answer = rewound.api.call("POST", path, {"restore_point": "9-999"})
    assert answer.status_code == 410
    answer = rewound.api.call("POST", path, {"offsets": {"7": 0}})
    assert answer.status_code == 422 and "partition 7" in answer.json()["message"]
    both = {"restore_point": "0-0", "to": future}
    assert rewound.api.call("POST", path, both).status_code == 422
    naive = {"to": "2026-11-25T10:00:00"}  # no zone: which 10:00?
    assert rewound.api.call("POST", path, naive).status_code == 422
    assert rewound.api.call("GET", path).json() == before  # nothing moved
    # One rewind per output at a time: a second one while the first replays is refused (it
    # replays until the fleet has seen it commit, seconds at least).
    eventually("clicks not replaying", lambda: not rewound.replaying("clicks"), timeout=180)
    first = rewound.rewind("clicks", restore_point=rewound.before_bad["clicks"])
    answer = rewound.api.call("POST", path, {"restore_point": rewound.before_bad["clicks"]})
    assert answer.status_code == 409 and first["id"] in answer.json()["message"]
    eventually(
        "the first to catch up", lambda: rewound.state("clicks")["state"] == "caught_up", 120
    )


# Backfills (issue 31): the backfilled outputs' middle hour, routed again from the archive.


def _iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def _backfill(rewound: Rewound, output: str, start: int, end: int, **body: object) -> dict:
    path = f"/v1/streams/{STREAM}/outputs/{output}/backfill"
    return rewound.api.ok("POST", path, {"from": _iso(start), "to": _iso(end), **body})


def _backfilled(rewound: Rewound, output: str) -> dict | None:
    """The output's latest backfill, None if it has none."""
    answer = rewound.api.call("GET", f"/v1/streams/{STREAM}/outputs/{output}/backfill")
    if answer.status_code == 404:
        return None
    assert answer.status_code == 200, answer.text
    return answer.json()


def _idle(rewound: Rewound, output: str) -> bool:
    latest = _backfilled(rewound, output)
    return latest is None or latest["state"] not in ("running", "cancelling")


def _archived(rewound: Rewound) -> bool:
    """The archive holds every event sent within its retention, once."""
    guids = [r["guid"] for r in rewound.archive()]
    return sorted(guids) == sorted(set(rewound.sent) - rewound.expired)


def _application(rewound: Rewound, output: str) -> int | None:
    """The pid of the output's backfill application while it runs."""
    record = rewound.stack.settings.job_run_dir(Backfill.kind) / f"{STREAM}.{output}.json"
    return PidFile(record).running_pid()


def test_the_archive_keeps_each_record_as_kafka_had_it_and_drops_hours_past_retention(
    rewound: Rewound,
) -> None:
    eventually("the archive to hold every event", lambda: _archived(rewound), timeout=120)
    settings = rewound.stack.settings
    took = {}  # guid -> the fronting cluster that took it, and its record there
    for cluster in fronting.clusters(settings):
        connection = kafka_clients.librdkafka(cluster.connect(settings))
        for m in read_topic(connection, f"keystone.{STREAM}"):
            took[m.key().decode()] = (cluster.name, m)
    assert {g for g, (c, _) in took.items() if c == "west"} == rewound.on_west
    rows = rewound.archive()
    for row in rows:
        cluster, record = took[row["guid"]]
        assert json.loads(row["value"]) == rewound.sent[row["guid"]]
        assert row["value"] == record.value().decode() and row["key"] == row["guid"]
        headers = {h["key"]: h["value"] for h in row["headers"]}
        assert headers == {k: v.decode() for k, v in record.headers()}
        assert (row["partition"], row["offset"]) == (record.partition(), record.offset())
        assert row["cluster"] == cluster  # the fronting cluster that took it
        assert row["timestamp"] == int(headers[envelope.TIMESTAMP])
        assert (row["app"], row["host"]) == (APP, headers[envelope.HOST])
        hour = time.gmtime(row["timestamp"] / 1000)
        assert (row["dateint"], row["hour"]) == (int(time.strftime("%Y%m%d", hour)), hour.tm_hour)
    # Three days old: its hour was dropped whole when the archive looked (at the redeploy).
    assert rewound.expired and not rewound.expired & {r["guid"] for r in rows}
    oldest = min(r["timestamp"] for r in rows)
    assert oldest >= time.time() * 1000 - 2 * 86_400_000
    status = rewound.api.ok("GET", f"/v1/streams/{STREAM}/status")
    assert status["archive"]["name"] == "_archive" and status["archive"]["sink"] == "hive"


def test_backfilling_the_bad_hour_from_the_archive_leaves_each_sink_right_even_if_killed(
    rewound: Rewound,
) -> None:
    eventually("the archive to hold every event", lambda: _archived(rewound), timeout=120)
    start, end = rewound.first_hour + HOUR_MS, rewound.first_hour + 2 * HOUR_MS
    # Only the middle hour's files are read: partition pruning leaves the others out.
    files = rewound.tables.archive_files(STREAM, start, end)
    hour = time.gmtime(start / 1000)
    partition = f"/dateint={time.strftime('%Y%m%d', hour)}/hour={hour.tm_hour}/"
    assert files and all(partition in f for f in files), files
    ids = {}
    # Hive's at ten events a second: the hour's 200 archived events in two slices of 100, ten
    # seconds each, so that its application can be killed between them.
    rates = {"bf_clicks": None, "bf_search": None, "bf_warehouse": 10}
    for output, rate in rates.items():
        eventually(f"{output} not being backfilled", lambda o=output: _idle(rewound, o), 300)
        plan = _backfill(rewound, output, start, end, dry_run=True)
        assert plan["state"] == "planned" and plan["sink"]["effect"]
        if rate is None:  # from the command line
            asked = ("output", "backfill", STREAM, output, "--from", _iso(start), "--to", _iso(end))
            started = json.loads(checked(rewound.stack.keystone(*asked, "--yes", "--json")).stdout)
            assert started["state"] == "running", started
            ids[output] = started["id"]
        else:
            ids[output] = _backfill(rewound, output, start, end, max_events_per_second=rate)["id"]

    def one_slice_written() -> bool:
        state = _backfilled(rewound, "bf_warehouse") or {}
        return state.get("read", 0) >= BATCH // 2 and state.get("state") == "running"

    eventually("Hive's first slice to be written", one_slice_written, timeout=180)
    pid = _application(rewound, "bf_warehouse")
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)  # the application and its JVM, between its slices
    for output, backfill_id in ids.items():
        eventually(
            f"{output}'s backfill to be done",
            lambda o=output: (_backfilled(rewound, o) or {}).get("state") == "done",
            timeout=240,
        )
        state = _backfilled(rewound, output)
        assert state is not None and state["id"] == backfill_id
        archived = BATCH + UNREADABLE
        assert (state["events"], state["read"]) == (archived, archived)  # each slice once
        assert state["delivered"] == len(rewound.kept(True, (1,)))
        assert (state["unreadable"], state["dead_lettered"]) == (UNREADABLE, 0)
        assert state["hours"] == state["hours_done"] == 1
    assert _backfilled(rewound, "bf_warehouse")["attempts"] >= 2  # started again after the kill
    said = checked(rewound.stack.keystone("output", "backfill", STREAM, "bf_clicks", "--status"))
    assert ids["bf_clicks"] in said.stdout and "done" in said.stdout, said.stdout
    # Elasticsearch and Hive: each event once, as the fixed output gives it; the bad deploy's
    # documents and rows of the hour are gone.
    good = {g: rewound.good(g) for g in rewound.kept(True)}
    warehouse = rewound.warehouse("bf_warehouse")
    assert sorted(g for g, _ in warehouse) == sorted(good)  # no row twice, none missing
    assert dict(warehouse) == good
    search = rewound.search("bf_search")
    assert len(search) == len(good) and dict(search) == good
    assert _backfilled(rewound, "bf_search")["removed"] == len(rewound.kept(False, (1,)))
    # Kafka: the hour's records written again, flagged with the backfill; the first copies stay.
    records = rewound.kafka("bf_clicks")
    replays = [(g, r) for g, r, h in records if h.get(envelope.REPLAY) == ids["bf_clicks"]]
    assert sorted(g for g, _ in replays) == sorted(rewound.kept(True, (1,)))
    assert all(r == rewound.good(g) for g, r in replays)
    live = sorted(g for g, _, h in records if envelope.REPLAY not in h)
    assert live == sorted(rewound.kept(True, (0, 2)) | rewound.kept(False, (1,)))
    # What the fixed filter cannot read: out of the sinks (above), in the archive, no dead letter.
    letters = read_topic(rewound.stack.kafka(), f"keystone.{STREAM}.dlq")
    assert not {_headers(m)[envelope.GUID] for m in letters} & rewound.unreadable
    assert rewound.unreadable <= {r["guid"] for r in rewound.archive()}
    audit = rewound.api.audit()
    logged = {e["detail"]["backfill"] for e in audit if e["action"] == "output.backfill"}
    assert set(ids.values()) <= logged


@pytest.mark.exclusive  # it stops or restarts a service every test uses
def test_a_backfill_is_cancelled_and_requests_that_cannot_be_carried_out_start_nothing(
    rewound: Rewound, admin: Api
) -> None:
    eventually("the archive to hold every event", lambda: _archived(rewound), timeout=120)
    path = f"/v1/streams/{STREAM}/outputs/bf_search/backfill"
    start, end = rewound.first_hour, rewound.first_hour + 3 * HOUR_MS
    body = {"from": _iso(start), "to": _iso(end)}
    stranger = owner(admin, "team-stranger-bf")
    assert stranger.call("POST", path, body).status_code == 404
    nowhere = f"/v1/streams/{STREAM}/outputs/nowhere/backfill"
    assert rewound.api.call("POST", nowhere, body).status_code == 404
    future = {"from": _iso(start), "to": (datetime.now(UTC) + timedelta(hours=1)).isoformat()}
    answer = rewound.api.call("POST", path, future)
    assert answer.status_code == 422 and "future" in answer.json()["message"]
    naive = {"from": "2026-11-25T10:00:00", "to": _iso(end)}  # no zone: which 10:00?
    assert rewound.api.call("POST", path, naive).status_code == 422
    # Within the two days' retention, but before the archive's first event (it holds nothing
    # older since the three-day-old hour was dropped): that event's ingest time is named.
    early = {"from": _iso(start - HOUR_MS), "to": _iso(end)}
    answer = rewound.api.call("POST", path, early)
    assert answer.status_code == 422 and answer.json()["earliest"] == _iso(start), answer.text
    # One per output at a time; a cancelled one stops its application.
    eventually("bf_search not being backfilled", lambda: _idle(rewound, "bf_search"), 300)
    first = _backfill(rewound, "bf_search", start, end, max_events_per_second=1)
    answer = rewound.api.call("POST", path, body)
    assert answer.status_code == 409 and first["id"] in answer.json()["message"]
    eventually("its application to run", lambda: _application(rewound, "bf_search"), 60)
    # Control restarted meanwhile: the application outlives it, and is adopted, not started again.
    pid, attempts = (
        _application(rewound, "bf_search"),
        _backfilled(rewound, "bf_search")["attempts"],
    )
    control = PidFile(rewound.stack.state_dir / "run" / "control.pid")
    try:
        assert stop(control, signal.SIGTERM, timeout=30)
        assert _application(rewound, "bf_search") == pid
    finally:
        checked(rewound.stack.keystone("stack", "up", timeout=300))  # control back, whatever failed
    time.sleep(5)  # several fleet passes
    assert _application(rewound, "bf_search") == pid
    again = _backfilled(rewound, "bf_search")
    assert (again["state"], again["attempts"]) == ("running", attempts)
    cancel = ("output", "backfill", STREAM, "bf_search", "--cancel", "--json")
    cancelling = json.loads(checked(rewound.stack.keystone(*cancel)).stdout)
    assert (cancelling["id"], cancelling["state"]) == (first["id"], "cancelling")
    eventually(
        "the backfill to be cancelled",
        lambda: (_backfilled(rewound, "bf_search") or {}).get("state") == "cancelled",
        timeout=120,
    )
    assert _application(rewound, "bf_search") is None
    assert rewound.api.call("DELETE", path).status_code == 409  # nothing left to cancel
    audit = rewound.api.audit()
    assert any(
        e["action"] == "output.backfill.cancel" and e["detail"]["backfill"] == first["id"]
        for e in audit
    )
