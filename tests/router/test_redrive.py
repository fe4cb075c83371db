"""Dead letters redriven end to end on the real stack (issue 31): a stream whose schema is too
strict (an `amount` that may be text is refused) and whose Elasticsearch output meets a mapping
conflict (a `code` that is a number in the index and text in some events) dead-letters both
kinds: the stream's for the first (every output missed them), the search output's for the
second (only it did). A redrive before the fix sends the stream's again and they fail again,
dead letters anew with their count; the causes are fixed (the schema takes text, the search
output writes `code` under another name); a redrive of all then sends each event only to where
it had failed, exactly once there, a dead letter written twice (as a restarted router does)
included; and a redrive again sends nothing. Each sink is compared with what the spec gives,
computed with the Python evaluator.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Producer

from keystone.contracts import envelope
from keystone.contracts.elasticsearch import Connection
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

STREAM, OWNER, APP = "rd_main", "team-redrive", "rd_app"
PROJECTION = ["n", "kind", "code", "amount"]
FIXED = ["n", "kind", "code as code_text", "amount"]  # the search output's fix
EACH = 30  # events of each kind


def schema(amount: list[str]) -> dict:
    return {
        "type": "record",
        "name": "Event",
        "fields": [
            {"name": "n", "type": "long"},
            {"name": "kind", "type": "string"},
            {"name": "code", "type": ["long", "string"]},
            {"name": "amount", "type": amount},
        ],
    }


def spec(fixed: bool) -> dict:
    batches = {"mode": "microbatch", "trigger": "5 seconds"}
    outputs = {
        "clicks": ({"type": "kafka"}, PROJECTION),
        "search": ({"type": "elasticsearch"}, FIXED if fixed else PROJECTION),
        "warehouse": ({"type": "hive"}, PROJECTION),
    }
    return {
        "name": STREAM,
        "owner": OWNER,
        "partitions": 2,
        "producers": [APP],
        "archive": {"enabled": False},  # redrives read the dead letters, never the archive
        "schema": schema(["long", "string"] if fixed else ["long"]),
        "outputs": [
            {"name": n, "sink": s, "projection": p, "delivery": batches, "start": "earliest"}
            for n, (s, p) in outputs.items()
        ],
    }


@dataclass
class Redriven:
    stack: Stack
    api: Api
    tables: Tables
    producer: DirectProducer
    kinds: dict[str, set[str]] = field(default_factory=dict)  # good, strict, conflict -> guids
    sent: dict[str, dict] = field(default_factory=dict)

    def send(self, kind: str, events: list[dict]) -> None:
        guids = self.producer.send(STREAM, events).guids
        self.kinds.setdefault(kind, set()).update(guids)
        self.sent.update(zip(guids, events, strict=True))

    def router_pid(self) -> int | None:
        deployed = Deployment.load(self.stack.settings, STREAM)
        return deployed.pid if deployed is not None and deployed.alive() else None

    def kafka(self) -> list[tuple[str, dict, dict]]:
        return [
            (m.key().decode(), json.loads(m.value()), {k: v.decode() for k, v in m.headers()})
            for m in read_topic(self.stack.kafka(), f"{STREAM}.clicks")
        ]

    def search(self) -> dict[str, dict]:
        return dict(
            search_documents(Connection.of(self.stack.settings), f"{STREAM}-search-*", source=True)
        )

    def warehouse(self) -> list[tuple[str, dict]]:
        rows = self.tables.read(f"keystone.{STREAM}__warehouse")
        return [(r["guid"], json.loads(r["record"])) for r in rows]

    def record(self, guid: str, projection: list[str] = PROJECTION) -> dict:
        return project(parse_projection(projection), self.sent[guid], {"guid": guid})

    def dead_letters(self) -> dict[tuple[str, str], dict]:
        groups = self.api.ok("GET", f"/v1/streams/{STREAM}/dead-letters")["groups"]
        return {(g["output"], g["reason"]): g for g in groups}

    def redrive(self, **body: object) -> dict:
        answer = self.api.call("POST", f"/v1/streams/{STREAM}/dead-letters/redrive", body)
        assert answer.status_code in (200, 202), answer.text
        return answer.json()

    def redrive_state(self) -> dict:
        return self.api.ok("GET", f"/v1/streams/{STREAM}/dead-letters/redrive")

    def redrive_done(self, redrive_id: str) -> dict:
        def done() -> bool:
            state = self.redrive_state()
            assert state["id"] == redrive_id
            assert state["state"] in ("running", "done"), state
            return state["state"] == "done"

        eventually(f"redrive {redrive_id} to be done", done, timeout=180)
        return self.redrive_state()


@pytest.fixture(scope="module")
def redriven(stack: Stack, admin: Api) -> Iterator[Redriven]:
    team = owner(admin, OWNER)
    team.ok("POST", "/v1/apps", {"name": APP})
    team.ok("POST", "/v1/streams", spec(fixed=False))
    handle = Redriven(stack, team, Tables(stack), DirectProducer(stack.kafka(), APP))
    try:
        handle.send(
            "good", [{"n": n, "kind": "click", "code": 7, "amount": n} for n in range(EACH)]
        )
        # Elasticsearch maps `code` as a number from the first documents: let those land first.
        eventually(
            "the good events in search", lambda: handle.kinds["good"] <= set(handle.search())
        )
        handle.send(
            "strict", [{"n": n, "kind": "view", "code": 7, "amount": str(n)} for n in range(EACH)]
        )
        handle.send(
            "conflict", [{"n": n, "kind": "buy", "code": f"c{n}", "amount": n} for n in range(EACH)]
        )

        def dead_lettered() -> bool:
            groups = handle.dead_letters()
            return (
                sum(g["count"] for (o, _), g in groups.items() if o == "_stream") == EACH
                and sum(g["count"] for (o, _), g in groups.items() if o == "search") == EACH
            )

        eventually("both kinds dead-lettered", dead_lettered, timeout=180)
        yield handle
    finally:  # a setup that failed too: its router must not load the tests after it
        handle.tables.close()
        team.call("DELETE", f"/v1/streams/{STREAM}")


def test_dead_letters_fail_again_until_fixed_then_reach_only_where_they_failed(
    redriven: Redriven,
) -> None:
    strict, conflict, good = (redriven.kinds[k] for k in ("strict", "conflict", "good"))
    groups = redriven.dead_letters()
    [(stream_reason, refused)] = [(r, g) for (o, r), g in groups.items() if o == "_stream"]
    assert "schema" in stream_reason and refused["count"] == EACH and refused["samples"]
    [es_reason] = [r for (o, r) in groups if o == "search"]
    assert "elasticsearch refused" in es_reason

    # Before the fix: the stream's dead letters are sent again and fail again.
    plan = redriven.redrive(output="_stream", dry_run=True)
    assert plan["state"] == "planned" and plan["events"] == EACH
    assert plan["outputs"] == {"clicks": EACH, "search": EACH, "warehouse": EACH}
    first = redriven.redrive(output="_stream", max_events_per_second=1000)
    state = redriven.redrive_done(first["id"])
    assert (state["read"], state["dead_lettered"]) == (EACH, EACH)
    assert sum(state["delivered"].values()) == 0
    groups = redriven.dead_letters()
    assert groups[("_stream", stream_reason)]["count"] == 2 * EACH  # anew, with the same reason
    assert groups[("_stream", stream_reason)]["redriven"] == EACH
    again = [
        h
        for m in read_topic(redriven.stack.kafka(), f"keystone.{STREAM}.dlq")
        if (h := {k: v.decode() for k, v in m.headers()}).get(envelope.REDRIVES) == "1"
    ]
    assert {h[envelope.GUID] for h in again} == strict  # each counted once redriven

    # The fix: the schema takes text amounts; search writes `code` under another name. The
    # probe goes once the fixed router runs: one the old router's dead-letter query read during
    # the redeploy would be a dead letter that the new router's outputs had delivered.
    before = redriven.router_pid()
    redriven.api.ok("PUT", f"/v1/streams/{STREAM}", spec(fixed=True))
    eventually(
        "the fixed router to run",
        lambda: (
            redriven.router_pid() not in (None, before)
            and redriven.api.ok("GET", f"/v1/streams/{STREAM}/status")["router"]["state"]
            == "running"
        ),
        timeout=180,
    )
    redriven.send("probe", [{"n": -1, "kind": "probe", "code": "p", "amount": "1"}])
    eventually(
        "the fixed spec to run",
        lambda: redriven.kinds["probe"] <= set(redriven.search()),
        timeout=240,
    )

    # A router killed after writing a dead letter writes it again when it restarts: a copy of
    # one of the stream's is marked with it, and sent once (else Hive would hold it twice).
    dlq = f"keystone.{STREAM}.dlq"
    [copied, *_] = [
        m
        for m in read_topic(redriven.stack.kafka(), dlq)
        if dict(m.headers()).get(envelope.REDRIVES) == b"1"
    ]
    again = Producer(redriven.stack.kafka())
    again.produce(dlq, key=copied.key(), value=copied.value(), headers=copied.headers())
    assert again.flush(30) == 0

    plan = redriven.redrive(dry_run=True)
    assert plan["events"] == 2 * EACH  # the new dead letters of the stream, and search's
    assert plan["outputs"] == {"clicks": EACH, "search": 2 * EACH, "warehouse": EACH}
    assert plan["copies"] == 1
    second = redriven.redrive(max_events_per_second=1000)
    state = redriven.redrive_done(second["id"])
    assert state["delivered"] == {"clicks": EACH, "search": 2 * EACH, "warehouse": EACH}
    assert (state["events"], state["read"], state["copies"]) == (2 * EACH, 2 * EACH, 1)
    assert state["dead_lettered"] == 0

    # Each event exactly where it should be, once.
    probe = redriven.kinds["probe"]
    live = good | conflict | probe
    records = redriven.kafka()
    assert sorted(g for g, _, _ in records) == sorted(live | strict)
    replays = {g: h for g, _, h in records if envelope.REPLAY in h}
    assert set(replays) == strict and {h[envelope.REPLAY] for h in replays.values()} == {
        second["id"]
    }
    assert all(h[envelope.REDRIVES] == "2" for h in replays.values())
    assert all(r == redriven.record(g) for g, r, _ in records)
    warehouse = redriven.warehouse()
    assert sorted(g for g, _ in warehouse) == sorted(live | strict)
    assert all(r == redriven.record(g) for g, r in warehouse)
    search = redriven.search()
    assert set(search) == good | conflict | strict | probe
    for guid, document in search.items():
        fixed = guid in conflict | strict | probe
        assert document == redriven.record(guid, FIXED if fixed else PROJECTION), guid

    # Again, from the command line: every dead letter is redriven, nothing left to send.
    listed = json.loads(
        checked(redriven.stack.keystone("dead-letters", "list", STREAM, "--json")).stdout
    )
    counts = {(g["output"], g["count"], g["redriven"]) for g in listed["groups"]}
    assert counts == {("_stream", 2 * EACH + 1, 2 * EACH + 1), ("search", EACH, EACH)}
    plan = redriven.redrive(dry_run=True)
    assert plan["events"] == 0
    again = redriven.stack.keystone("dead-letters", "redrive", STREAM, "--yes", "--json")
    third = json.loads(checked(again).stdout)
    assert (third["state"], third["events"]) == ("done", 0)
    assert sorted(g for g, _, _ in redriven.kafka()) == sorted(live | strict)
    audit = redriven.api.audit()
    logged = {e["detail"]["redrive"] for e in audit if e["action"] == "stream.redrive"}
    assert {first["id"], second["id"], third["id"]} <= logged


def test_a_redrive_that_cannot_be_carried_out_starts_nothing(
    redriven: Redriven, admin: Api
) -> None:
    path = f"/v1/streams/{STREAM}/dead-letters/redrive"
    stranger = owner(admin, "team-stranger-rd")
    assert stranger.call("POST", path, {}).status_code == 404
    assert stranger.call("GET", f"/v1/streams/{STREAM}/dead-letters").status_code == 404
    assert redriven.api.call("POST", path, {"output": "nowhere"}).status_code == 404
    nothing = redriven.redrive(reason="no such reason")
    assert (nothing["state"], nothing["events"]) == ("done", 0)  # none: not an error
    naive = {"from": "2026-11-25T10:00:00"}  # no zone: which 10:00?
    assert redriven.api.call("POST", path, naive).status_code == 422
