"""Rewinds end to end on the real stack (issue 30): a stream with one output per sink type
receives known events; a "bad deploy" (a wrong projection) runs for a while and is fixed; each
output is rewound to its restore point from before the bad deploy; afterwards each sink holds
exactly what the fixed projection gives, computed independently with the Python evaluator:
Hive and Elasticsearch each event once, Kafka and Keystone each event with its replayed copy
flagged `ks_replay`. Then a rewind whose router is killed halfway loses nothing; and requests
that cannot be carried out move nothing.

The tests share one stream and run in order of need: each checks what it needs first.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from keystone.contracts import envelope
from keystone.control.launcher import Deployment
from keystone.ingest_proxy.client import DirectProducer
from keystone.loadtest.topics import read_topic
from keystone.router.lang.evaluate import project
from keystone.router.lang.parser import parse_projection
from tests.support.api import Api, owner
from tests.support.stack import Stack
from tests.support.tables import Tables
from tests.support.waiting import eventually

STREAM, TARGET, OWNER, APP = "rw_main", "rw_copy", "team-rewind", "rw_app"
GOOD = ["n", "kind", "user.id as uid"]
BAD = ["n", "kind as wrong"]  # the bad deploy's projection
BATCH = 200  # events per phase


def outputs(projection: list[str]) -> list[dict]:
    """One output per sink type, each with `projection`, from the topic's start."""
    realtime = {"mode": "realtime", "trigger": "5 seconds"}
    sinks = {
        "clicks": ({"type": "kafka"}, realtime),
        "copy": ({"type": "keystone", "stream": TARGET}, realtime),
        "search": ({"type": "elasticsearch"}, realtime),
        "warehouse": ({"type": "hive"}, {"mode": "microbatch", "trigger": "5 seconds"}),
    }
    return [
        {"name": name, "projection": projection, "sink": sink, "delivery": delivery}
        | {"start": "earliest"}
        for name, (sink, delivery) in sinks.items()
    ]


def event(n: int) -> dict:
    return {"n": n, "kind": ("click", "view")[n % 2], "user": {"id": n % 13}}


@dataclass
class Rewound:
    stack: Stack
    api: Api
    tables: Tables
    producer: DirectProducer
    sent: dict[str, dict] = field(default_factory=dict)  # guid -> event
    before_bad: dict[str, str] = field(default_factory=dict)  # output -> its good restore point

    def send(self, numbers: range) -> None:
        events = [event(n) for n in numbers]
        guids = self.producer.send(STREAM, events).guids
        assert len(guids) == len(events)
        self.sent.update(zip(guids, events, strict=True))

    def spec(self, projection: list[str], **extra: object) -> dict:
        return {
            "name": STREAM,
            "owner": OWNER,
            "partitions": 2,
            "producers": [APP],
            "outputs": outputs(projection),
            **extra,
        }

    def router_pid(self) -> int | None:
        deployed = Deployment.load(self.stack.settings, STREAM)
        return deployed.pid if deployed is not None and deployed.alive() else None

    def good(self, guid: str) -> dict:
        return project(parse_projection(GOOD), self.sent[guid], {"guid": guid})

    # Each sink read back: every copy of every record, by guid.

    def kafka(self) -> list[tuple[str, dict, dict]]:
        return [
            (m.key().decode(), json.loads(m.value()), _headers(m))
            for m in read_topic(self.stack.address("kafka"), f"{STREAM}.clicks")
        ]

    def keystone(self) -> list[tuple[str, dict, dict]]:
        found = []
        for m in read_topic(self.stack.address("kafka"), f"keystone.{TARGET}"):
            headers = _headers(m)
            found.append((headers[envelope.GUID], json.loads(m.value()), headers))
        return found

    def search(self) -> list[tuple[str, dict]]:
        es = self.stack.address("elasticsearch")
        httpx.post(f"{es}/{STREAM}-search-*/_refresh", timeout=30)
        hits = httpx.get(
            f"{es}/{STREAM}-search-*/_search", params={"size": 10000}, timeout=30
        ).json()["hits"]["hits"]
        return [(h["_id"], h["_source"]) for h in hits]

    def warehouse(self) -> list[tuple[str, dict]]:
        rows = self.tables.read(f"keystone.{STREAM}__warehouse")
        return [(r["guid"], json.loads(r["record"])) for r in rows]

    def holds_everything(self) -> bool:
        """Every event sent is in every output (in some form)."""
        sent = set(self.sent)
        return (
            sent <= {g for g, _, _ in self.kafka()}
            and sent <= {g for g, _, _ in self.keystone()}
            and sent <= {g for g, _ in self.search()}
            and sent <= {g for g, _ in self.warehouse()}
        )

    def points(self, output: str) -> list[dict]:
        return self.api.ok("GET", f"/v1/streams/{STREAM}/outputs/{output}/restore-points")

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
    handle = Rewound(stack, team, Tables(stack), DirectProducer(stack.address("kafka"), APP))
    team.ok("POST", "/v1/streams", handle.spec(GOOD))
    handle.send(range(0, BATCH))
    eventually("the first events in every output", handle.holds_everything, timeout=240)
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
    team.ok("PUT", f"/v1/streams/{STREAM}", handle.spec(BAD))
    handle.send(range(BATCH, 2 * BATCH))

    def wrong_everywhere() -> bool:
        late = {g for g, e in handle.sent.items() if e["n"] >= BATCH}
        return late <= {g for g, r in handle.warehouse() if "wrong" in r} and late <= {
            g for g, r, _ in handle.kafka() if "wrong" in r
        }

    eventually("the bad deploy's records", wrong_everywhere, timeout=240)
    eventually("every output to have the bad deploy's events", handle.holds_everything, 120)
    team.ok("PUT", f"/v1/streams/{STREAM}", handle.spec(GOOD))
    handle.send(range(2 * BATCH, 3 * BATCH))
    eventually("the fixed deploy's events", handle.holds_everything, timeout=240)
    yield handle
    handle.tables.close()
    for stream in (STREAM, TARGET):
        team.call("DELETE", f"/v1/streams/{stream}")


def test_rewinding_each_output_past_a_bad_deploy_leaves_each_sink_right(
    rewound: Rewound,
) -> None:
    pid = rewound.router_pid()
    started = {}
    for output, point in rewound.before_bad.items():
        plan = rewound.rewind(output, restore_point=point, dry_run=True)
        assert plan["state"] == "planned" and plan["restore_point"] == point
        assert plan["events"] >= 2 * BATCH  # the bad deploy's and the fix's
        started[output] = rewound.rewind(output, restore_point=point)["id"]
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
    late = {g for g, e in rewound.sent.items() if e["n"] >= BATCH}
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
    audit = rewound.api.ok("GET", "/v1/audit", limit=50)
    logged = {e["detail"]["rewind"] for e in audit if e["action"] == "output.rewind"}
    assert set(started.values()) <= logged


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
