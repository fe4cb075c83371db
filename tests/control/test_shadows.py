"""Shadows on the real stack: a stream with Kafka, Elasticsearch and Hive outputs, and a shadow
of each (a field renamed, one hashed, the whole event against chosen fields, changed filters).
Each comparison counts exactly what the Python evaluator predicts for the events in its window
(read back from the fronting topic from where the shadow started), and each shadow's target
holds exactly the shadow's records; the live outputs are untouched (their router runs on, each
record once). Then one is dropped, one promoted (the output runs its version from the switch
on), one expires; each one's targets are then gone. The comparison Column by Column:
tests/router/test_shadow.py."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from confluent_kafka.admin import AdminClient
from playwright.sync_api import expect

from keystone.contracts import envelope, kafka_clients, metastore
from keystone.contracts.checkpoints import checkpoint_dir, latest, query_id
from keystone.contracts.elasticsearch import Connection
from keystone.contracts.names import HIVE_DATABASE, fronting_topic
from keystone.contracts.registry import RegistryReader
from keystone.contracts.shadows import Result
from keystone.control.launcher import Deployment
from keystone.ingest_proxy.client import DirectProducer
from keystone.router.lang.evaluate import matches, project
from keystone.router.lang.parser import parse_filter, parse_projection
from keystone.router.sinks.elasticsearch.readback import search_documents
from keystone.router.topics import missing_topics, read_topic
from tests.support.api import Api, owner
from tests.support.browser import artifact, chromium, log_in
from tests.support.json_values import same
from tests.support.stack import Stack, checked
from tests.support.tables import Tables
from tests.support.waiting import eventually

STREAM, OWNER, APP = "sh_main", "team-shadow", "sh_app"
BATCHES = {"mode": "microbatch", "trigger": "5 seconds"}
EARLIEST = "earliest"  # the live outputs read the events sent before their router started
LIVE = {
    "clicks": {
        "name": "clicks",
        "filter": "kind in ('a', 'b')",
        "projection": ["guid", "n", "kind", "user.id as user_id"],
        "sink": {"type": "kafka"},
        "delivery": {**BATCHES, "guarantee": "exactly_once"},  # its shadow's too
        "start": EARLIEST,
    },
    "search": {
        "name": "search",
        "projection": ["n", "country", "user.email as email"],
        "sink": {"type": "elasticsearch"},
        "delivery": BATCHES,
        "start": EARLIEST,
    },
    "warehouse": {
        "name": "warehouse",
        "sink": {"type": "hive"},
        "delivery": BATCHES,
        "start": EARLIEST,
    },
}
SHADOWS = {
    "clicks": {  # a field renamed, the filter changed
        **LIVE["clicks"],
        "filter": "kind in ('a', 'c')",
        "projection": ["guid", "n", "kind", "user.id as uid"],
    },
    "search": {  # a field hashed (the same where the event has none), a filter added
        **LIVE["search"],
        "filter": "country != 'FR'",
        "projection": ["n", "country", "hash(user.email) as email"],
    },
    "warehouse": {**LIVE["warehouse"], "projection": ["n", "kind", "user.id as user_id"]},
}
BURST = 1500  # events sent at once while the shadows run
EXPIRES = "75 seconds"  # the warehouse's shadow's, left to expire (it compares in some 10 s)


def event(n: int) -> dict:
    user = {"id": n % 7} if n % 5 == 0 else {"id": n % 7, "email": f"u{n}@example.com"}
    return {"n": n, "kind": "abc"[n % 3], "country": ("US", "CA", "FR")[n % 3], "user": user}


@dataclass
class Shadowed:
    stack: Stack
    team: Api
    key: bytes | None
    tables: Tables
    producer: DirectProducer
    shadows: dict[str, dict]  # each output's shadow as started
    router_pid: int

    def events(self, start: dict[int, int] | None = None) -> list[tuple[str, dict, dict]]:
        """The stream's events in the fronting topic (from `start`, per partition): guid,
        payload, metadata."""
        found = []
        for m in read_topic(self.stack.kafka(), f"keystone.{STREAM}"):
            if start is not None and m.offset() < start.get(m.partition(), 0):
                continue
            headers = {k: v.decode() for k, v in m.headers() or []}
            meta = {
                "guid": headers[envelope.GUID],
                "timestamp": int(headers[envelope.TIMESTAMP]),
                "host": headers[envelope.HOST],
                "app": headers[envelope.APP],
            }
            found.append((meta["guid"], json.loads(m.value()), meta))
        return found

    def records(self, output: dict, events: list[tuple[str, dict, dict]]) -> dict[str, dict]:
        """What `output` gives of the events, by guid (the Python evaluator)."""
        condition = parse_filter(output["filter"]) if output.get("filter") else None
        projection = parse_projection(output.get("projection", ["*"]))
        return {
            guid: project(projection, payload, meta, self.key)
            for guid, payload, meta in events
            if matches(condition, payload, meta, self.key)
        }

    def shadow(self, output: str) -> dict:
        return self.team.ok("GET", f"/v1/streams/{STREAM}/outputs/{output}/shadow")


def comparison(live: dict[str, dict], shadow: dict[str, dict], window: list) -> tuple:
    """The oracle's comparison of the window: counts per result, differing events per field."""
    counts: Counter[str] = Counter()
    fields: Counter[str] = Counter()
    for guid, _, _ in window:
        a, b = live.get(guid), shadow.get(guid)
        if a is None or b is None:
            kept = a is not None or b is not None
            result = (Result.ONLY_LIVE if a is not None else Result.ONLY_SHADOW) if kept else None
            counts[(result or Result.NEITHER).value] += 1
            continue
        missing = object()
        diff = [k for k in a.keys() | b.keys() if not same(a.get(k, missing), b.get(k, missing))]
        counts[(Result.DIFFERING if diff else Result.EQUAL).value] += 1
        fields.update(diff)
    return {r.value: counts[r.value] for r in Result}, dict(fields)


@contextmanager
def shadowed_stream(stack: Stack, admin: Api) -> Iterator[Shadowed]:
    """The stream, its live outputs holding the first events, and a shadow of each, started
    before the next events come."""
    team = owner(admin, OWNER)
    team.ok("POST", "/v1/apps", {"name": APP})
    spec = {
        "name": STREAM,
        "owner": OWNER,
        "partitions": 2,
        "outputs": list(LIVE.values()),
        "archive": {"enabled": False},
    }
    team.ok("POST", "/v1/streams", spec)
    registry = RegistryReader.connect(stack.settings)
    key = registry.hashing_key(STREAM)
    registry.close()
    tables = Tables(stack)
    producer = DirectProducer(stack.kafka(), APP)
    handle = Shadowed(stack, team, key, tables, producer, {}, 0)
    try:
        first = producer.send(STREAM, [event(n) for n in range(30)]).guids
        held = {  # the guids each live output holds
            "clicks": lambda: {g for g, _ in kafka_records(handle, f"{STREAM}.clicks")},
            "search": lambda: set(es_records(stack, f"{STREAM}-search-*")),
            "warehouse": lambda: {g for g, _ in hive_records(tables, f"{STREAM}__warehouse")},
        }
        events = handle.events()
        for name, read in held.items():
            want = set(handle.records(LIVE[name], events))
            eventually(
                f"{name} to hold the first events", lambda r=read, w=want: set(r()) == w, 300
            )
        assert len(events) == len(first)
        deployed = Deployment.load(stack.settings, STREAM)
        assert deployed is not None
        handle.router_pid = deployed.pid
        for name in ("clicks", "search"):
            body = {"output": SHADOWS[name]}
            handle.shadows[name] = team.ok(
                "POST", f"/v1/streams/{STREAM}/outputs/{name}/shadow", body
            )
        # The CLI's way, for the third.
        version = stack.state_dir / "sh_warehouse.json"
        version.write_text(json.dumps(SHADOWS["warehouse"]))
        started = checked(
            stack.keystone(
                "shadow", "start", STREAM, "-f", str(version), "--expires-in", EXPIRES, "--json"
            )
        )
        handle.shadows["warehouse"] = json.loads(started.stdout)
        producer.send(STREAM, [event(n) for n in range(30, 30 + BURST)])  # the load they compare
        yield handle
    finally:
        tables.close()
        team.call("DELETE", f"/v1/streams/{STREAM}")  # refused while a shadow has not ended


def kafka_records(handle: Shadowed, topic: str) -> list[tuple[str, dict]]:
    return [
        (m.key().decode(), json.loads(m.value())) for m in read_topic(handle.stack.kafka(), topic)
    ]


def es_records(stack: Stack, pattern: str) -> dict[str, dict]:
    return dict(search_documents(Connection.of(stack.settings), pattern, source=True))


def hive_records(tables: Tables, table: str) -> list[tuple[str, dict]]:
    return [(r["guid"], json.loads(r["record"])) for r in tables.read(f"{HIVE_DATABASE}.{table}")]


def each_comparison_counts_what_the_python_evaluator_predicts(shadowed: Shadowed) -> None:
    # The one left to expire first: it must have compared its window before.
    for name in ("warehouse", "clicks", "search"):
        started = shadowed.shadows[name]
        assert started["state"] == "running" and started["output"] == name, started
        window = shadowed.events({int(p): o for p, o in started["start"].items()})

        def compared(n: str = name, w: list = window) -> bool:
            return shadowed.shadow(n)["compared"] == len(w)

        eventually(f"{name}'s shadow to compare its window", compared, 240)
        live = shadowed.records(LIVE[name], window)
        version = shadowed.records(SHADOWS[name], window)
        counts, fields = comparison(live, version, window)
        shown = shadowed.shadow(name)
        assert (shown["counts"], shown["fields"]) == (counts, fields), name
        assert counts["differing"] > 0 and fields, name
        for sample in shown["samples"]:  # each field's value in each record, as JSON text
            records = (live[sample["guid"]], version[sample["guid"]])
            for field, texts in sample["fields"].items():
                for text, record in zip(texts, records, strict=True):
                    assert (text is None) == (field not in record)
                    assert text is None or same(json.loads(text), record[field])
        assert shown["delivered"] == len(version) and shown["dead_lettered"] == 0
    # As the CLI shows them: the comparison, and a line under the stream's outputs.
    clicks = shadowed.shadow("clicks")
    shown = " ".join(
        checked(shadowed.stack.keystone("shadow", "show", STREAM, "clicks")).stdout.split()
    )
    assert clicks["id"] in shown and f"{clicks['compared']:,} events compared" in shown
    assert f"{clicks['counts']['only_shadow']:,}" in shown and "uid" in shown  # a field
    listed = " ".join(checked(shadowed.stack.keystone("stream", "show", STREAM)).stdout.split())
    assert f"shadow {clicks['id']} of clicks: running" in listed
    # Where each writes: its records in its own targets (exactly once in Elasticsearch and Hive).
    clicks = shadowed.shadows["clicks"]
    window = shadowed.events({int(p): o for p, o in clicks["start"].items()})
    held = kafka_records(shadowed, f"keystone-shadow.{STREAM}-clicks")
    assert dict(held) == shadowed.records(SHADOWS["clicks"], window)
    search = shadowed.shadows["search"]
    window = shadowed.events({int(p): o for p, o in search["start"].items()})
    assert es_records(shadowed.stack, f"shadow--{STREAM}-search-*") == shadowed.records(
        SHADOWS["search"], window
    )
    warehouse = shadowed.shadows["warehouse"]
    window = shadowed.events({int(p): o for p, o in warehouse["start"].items()})
    rows = hive_records(shadowed.tables, f"{STREAM}__warehouse__shadow")
    assert sorted(g for g, _ in rows) == sorted(shadowed.records(SHADOWS["warehouse"], window))
    assert dict(rows) == shadowed.records(SHADOWS["warehouse"], window)


def the_live_outputs_run_on_untouched(shadowed: Shadowed) -> None:
    events = shadowed.events()
    clicks = shadowed.records(LIVE["clicks"], events)
    eventually(
        "the live clicks to hold every event",
        lambda: len(kafka_records(shadowed, f"{STREAM}.clicks")) >= len(clicks),
        120,
    )
    held = kafka_records(shadowed, f"{STREAM}.clicks")
    assert dict(held) == clicks and len(held) == len(clicks)  # each once: no restart replayed
    deployed = Deployment.load(shadowed.stack.settings, STREAM)
    assert deployed is not None and deployed.pid == shadowed.router_pid


def a_running_shadow_refuses_a_second_and_changes_to_its_output(shadowed: Shadowed) -> None:
    path = f"/v1/streams/{STREAM}/outputs/clicks"
    again = shadowed.team.call("POST", f"{path}/shadow", {"output": SHADOWS["clicks"]})
    assert again.status_code == 409 and "one shadow per output" in again.text
    changed = shadowed.team.call("PUT", path, {**LIVE["clicks"], "filter": "kind = 'a'"})
    assert changed.status_code == 409 and "promote or drop" in changed.text
    same_as_live = shadowed.team.call(
        "POST", f"/v1/streams/{STREAM}/outputs/search/shadow", {"output": LIVE["search"]}
    )
    assert same_as_live.status_code in (409, 422)


def dropped_promoted_and_expired_shadows_leave_no_target_behind(shadowed: Shadowed) -> None:
    stack, team = shadowed.stack, shadowed.team
    drop_from_the_page(shadowed)
    dropped = shadowed.shadow("clicks")
    assert (dropped["state"], dropped["end"]) in {("ending", "dropped"), ("ended", "dropped")}
    # The switch below at a known place: the live search has committed every event so far.
    total = len(shadowed.events())
    checkpoint = checkpoint_dir(stack.settings, STREAM, "search")

    def committed() -> bool:
        commit = latest(checkpoint, fronting_topic(STREAM))
        return commit is not None and sum(commit.offsets.values()) == total

    eventually("the live search to commit every event", committed, 120)
    promoted = team.ok("POST", f"/v1/streams/{STREAM}/outputs/search/shadow/promote")
    assert (promoted["state"], promoted["end"]) == ("ending", "promoted")
    outputs = team.ok("GET", f"/v1/streams/{STREAM}")["spec"]["outputs"]
    search = next(o for o in outputs if o["name"] == "search")
    assert (search["filter"], search["projection"]) == (
        SHADOWS["search"]["filter"],
        SHADOWS["search"]["projection"],
    )
    for name in ("clicks", "search", "warehouse"):
        eventually(
            f"{name}'s shadow to end", lambda n=name: shadowed.shadow(n)["state"] == "ended", 300
        )
    assert shadowed.shadow("warehouse")["end"] == "expired"
    # Nothing of them is left: their topics, indices and template, table, checkpoints.
    settings = stack.settings
    topics = [f"keystone-shadow.{STREAM}-clicks"] + [
        f"keystone-shadow-dlq.{STREAM}-{name}" for name in ("clicks", "search", "warehouse")
    ]
    assert missing_topics(settings, topics) == topics
    # The exactly-once shadow's consumer group too; the live output's stays.
    live = query_id(checkpoint_dir(settings, STREAM, "clicks"))
    admin = AdminClient(kafka_clients.librdkafka(settings))
    groups = {g.group_id for g in admin.list_consumer_groups(request_timeout=30).result().valid}
    assert {g for g in groups if g.startswith(f"keystone-eo.{STREAM}.")} == {
        f"keystone-eo.{STREAM}.clicks.{live}"
    }
    with Connection.of(settings).client(timeout=30) as es:
        assert es.get(f"/_cat/indices/shadow--{STREAM}-*", params={"format": "json"}).json() == []
        assert es.head(f"/_template/shadow--{STREAM}-search").status_code == 404
    with metastore.thrift_client(settings) as client:
        assert f"{STREAM}__warehouse__shadow" not in client.get_all_tables(HIVE_DATABASE)
    warehouse = Path(urlsplit(settings.warehouse_dir).path) / f"{HIVE_DATABASE}.db"
    assert (warehouse / f"{STREAM}__warehouse").is_dir()  # where the live table is
    assert not (warehouse / f"{STREAM}__warehouse__shadow").exists()
    left = {p.name for p in (settings.checkpoints_dir / STREAM).iterdir()}
    assert not {s["id"] for s in shadowed.shadows.values()} & left
    # The promoted version is the live output's from the switch on: each event since, once.
    after = 30 + BURST
    later = shadowed.producer.send(STREAM, [event(n) for n in range(after, after + 30)]).guids
    events = {g: (g, p, m) for g, p, m in shadowed.events()}
    promoted_records = shadowed.records(SHADOWS["search"], [events[g] for g in later])
    eventually(
        "the promoted search to hold the later events",
        lambda: set(promoted_records) <= set(es_records(stack, f"{STREAM}-search-*")),
        240,
    )
    held = es_records(stack, f"{STREAM}-search-*")
    assert {g: held[g] for g in later if g in held} == promoted_records
    earlier = [e for g, e in events.items() if g not in set(later)]
    assert {g: r for g, r in held.items() if g not in set(later)} == shadowed.records(
        LIVE["search"], earlier
    )
    team.ok("DELETE", f"/v1/streams/{STREAM}")


def test_three_shadows_compared_then_dropped_promoted_and_expired(stack: Stack, admin: Api) -> None:
    """One scenario, in its order: the shadows compared while they run, then ended."""
    with shadowed_stream(stack, admin) as shadowed:
        a_running_shadow_refuses_a_second_and_changes_to_its_output(shadowed)
        lineage_and_previews_know_the_shadows(shadowed)
        each_comparison_counts_what_the_python_evaluator_predicts(shadowed)
        the_live_outputs_run_on_untouched(shadowed)
        dropped_promoted_and_expired_shadows_leave_no_target_behind(shadowed)


def lineage_and_previews_know_the_shadows(shadowed: Shadowed) -> None:
    fields = shadowed.team.ok("GET", f"/v1/streams/{STREAM}/lineage")["fields"]
    readers = {f["field"]: {r["output"] for r in f["outputs"]} for f in fields}
    assert "clicks (shadow)" in readers["user.id"] and "search (shadow)" in readers["user.email"]
    path = f"/v1/streams/{STREAM}/outputs/clicks/preview"
    shown = shadowed.team.ok("POST", path, {"shadow": True, "limit": 30})
    events = {g: (g, p, m) for g, p, m in shadowed.events()}
    records = {r["guid"]: r["record"] for r in shown["records"]}
    assert records and records == shadowed.records(SHADOWS["clicks"], [events[g] for g in records])


def drop_from_the_page(shadowed: Shadowed) -> None:
    """The stream's page shows the clicks' shadow as it compares (the counts, the fields that
    differ), and drops it once asked and confirmed."""
    team, clicks = shadowed.team, shadowed.shadow("clicks")
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1200})
        page.set_default_timeout(30_000)
        log_in(page, team.url, team.token)
        page.goto(f"{team.url}/ui/streams/{STREAM}#shadows")
        box = page.locator("#shadow-clicks")
        box.locator("summary").click()
        summary = box.locator("[data-shadow-summary]")
        expect(summary).to_contain_text(f"shadow {clicks['id']}: running")
        expect(summary).to_contain_text(f"{clicks['compared']:,} events compared")
        expect(box.locator("[data-shadow-fields] tbody tr").first).to_contain_text("uid")
        expect(box.locator("form.shadow-form")).to_be_hidden()  # one at a time
        page.screenshot(path=artifact("ui-shadow.png"), full_page=True)
        page.on("dialog", lambda dialog: dialog.accept())
        box.locator("[data-shadow-drop]").click()
        expect(summary).to_contain_text("(dropped)")
        expect(box.locator("[data-shadow-promote]")).to_be_disabled()
