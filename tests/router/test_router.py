"""The router job end to end on the real stack: one stream, four outputs (one per sink type,
different filters and projections), known events produced to the fronting topic, and every sink
read back and compared with what the Python evaluator says it should hold. Then faults: the
router killed with SIGKILL mid-stream (control's fleet starts it again), Elasticsearch stopped
for a while; and a stream deleted, which stops its router gracefully.

The stream is created through control, whose fleet runs its router, as in production. The tests
share one router and one growing set of events, in any order: the fixture produces the first
1,500 events, waits until every output has them and reads every output then (`Routed.at_load`,
what the first three tests check, before any fault can add to it); the fault tests count from
what they find, and the deletion has its own stream.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from keystone.contracts import envelope, http
from keystone.contracts.elasticsearch import Connection
from keystone.contracts.processes import PidFile, stat_fields, stop
from keystone.contracts.registry import RegistryReader
from keystone.contracts.settings import MAX_EVENT_BYTES
from keystone.control.launcher import Deployment
from keystone.ingest_proxy.client import DirectProducer
from keystone.router.lang.evaluate import matches, project
from keystone.router.lang.parser import parse_filter, parse_projection
from keystone.router.sinks.elasticsearch.readback import search_documents
from keystone.router.topics import read_topic
from tests.support.kafka import produce
from tests.support.processes import alive, groups_alive
from tests.support.stack import Stack, checked
from tests.support.tables import Tables

STREAM, TARGET = "rt_main", "rt_copy"
CHECKPOINT_SECONDS = 5  # the Kafka output's Real-time Mode checkpoint interval
SPEC = {
    "name": STREAM,
    "owner": "team-router",
    "partitions": 3,
    "producers": ["rt_app"],
    "schema": {
        "type": "record",
        "name": "Event",
        "fields": [
            {"name": "n", "type": "long"},
            {"name": "kind", "type": "string"},
            {
                "name": "user",
                "type": {
                    "type": "record",
                    "name": "User",
                    "fields": [
                        {"name": "id", "type": "long"},
                        {"name": "country", "type": ["null", "string"]},
                    ],
                },
            },
            {"name": "amount", "type": ["long", "string"]},
        ],
    },
    # The routing here; the archive (one more query per router) is tests/router/test_recovery.py's.
    "archive": {"enabled": False},
    "outputs": [
        {
            "name": "clicks",
            "filter": "kind = 'click' and user.country in ('US', 'CA')",
            # Every output's projection has hygiene and computed fields: each sink gets what
            # the Python evaluator computes, hashes by the stream's key included.
            "projection": ["guid", "timestamp", "app", "hash(user.id) as uid", "n * 2.5 as n"],
            "sink": {"type": "kafka"},
            "delivery": {"mode": "realtime", "trigger": f"{CHECKPOINT_SECONDS} seconds"},
            "start": "earliest",
        },
        {
            "name": "warehouse",
            "projection": [
                "* except user.country",
                "mask(kind, 2) as kind",
                "date_of(timestamp) as day",
            ],
            "sink": {"type": "hive"},
            "delivery": {"mode": "microbatch", "trigger": "5 seconds"},
            "start": "earliest",
        },
        {
            "name": "search",
            "filter": "lower(user.country) in ('us', 'ca', 'fr') and n >= 0",
            "projection": [
                "guid",
                "n",
                "kind",
                "amount",
                "user.country as country",
                "concat(lower(kind), '-', to_string(n)) as label",
            ],
            "sink": {"type": "elasticsearch"},
            "start": "earliest",
        },
        {
            "name": "errors",
            "filter": "kind = 'error' or amount like 'lots%'",
            # `again`: the record of event OVERSIZE is larger than an event may be.
            "projection": [
                "n",
                "upper(kind) as kind",
                "redact(user.id) as uid",
                "amount",
                "amount as again",
                "coalesce(user.country, 'none') as country",
            ],
            "sink": {"type": "keystone", "stream": TARGET},
            "start": "earliest",
        },
    ],
}
# The search index maps `amount` as a number, so events whose amount is text can never be
# indexed there: they must reach the dead-letter topic, from that output, with ES's reason.
MAPPING = {"mappings": {"properties": {"amount": {"type": "long"}}}}
MALFORMED = [
    (b"not json at all", {"ks_guid": "bad-1", "ks_ts": "1"}, "not JSON"),
    (b"[1, 2, 3]", {"ks_guid": "bad-2", "ks_ts": "1"}, "not a JSON object"),
    (b'{"n": 1}', {"ks_ts": "1"}, "no ks_guid header"),
    (b'{"n": 2}', {"ks_guid": "bad-4", "ks_ts": "yesterday"}, "no ks_ts header"),
    (
        b'{"n": 3, "kind": "view", "user": {"id": "me"}, "amount": 1}',
        {"ks_guid": "bad-5", "ks_ts": "1"},
        "does not match the stream's schema at user.id",
    ),
    # As large as an event may be: its dead letter, reason and all, must fit.
    (b"x" * MAX_EVENT_BYTES, {"ks_guid": "bad-6", "ks_ts": "1"}, "not JSON"),
]
KAFKA_RATE = 100  # events per second while the router is killed
OVERSIZE = 1234  # its amount is 60% of the largest event, so its `errors` record is too large


def event(n: int) -> dict:
    return {
        "n": n,
        "kind": ("click", "view", "error")[n % 3],
        "user": {"id": n % 50, "country": ("US", "CA", "FR", None)[n % 4]},
        "amount": (
            f"lots of {n}{'!' * (MAX_EVENT_BYTES * 6 // 10) if n == OVERSIZE else ''}"
            if n % 97 == 0 or n == OVERSIZE
            else n * 3
        ),
    }


def fitting(records: dict[str, dict]) -> dict[str, dict]:
    """The records a Kafka or Keystone output delivers: those no larger than an event may be
    (the others are its dead letters)."""
    return {
        g: r
        for g, r in records.items()
        if len(json.dumps(r, separators=(",", ":")).encode()) <= MAX_EVENT_BYTES
    }


@dataclass
class Fronting:
    """What was produced to the stream (read back from Kafka) and what each output should
    therefore hold, by guid, computed with the Python evaluator."""

    events: dict[str, tuple[dict, dict]] = field(default_factory=dict)  # guid: (payload, meta)
    key: bytes | None = None  # the stream's, for `hash` (control's, read from the registry)

    def expected(self, output: str) -> dict[str, dict]:
        spec = next(o for o in SPEC["outputs"] if o["name"] == output)
        expr = parse_filter(spec["filter"]) if spec.get("filter") else None
        projection = parse_projection(spec["projection"])
        return {
            guid: project(projection, payload, meta, self.key)
            for guid, (payload, meta) in self.events.items()
            if matches(expr, payload, meta, self.key)
        }


@dataclass(frozen=True)
class Outputs:
    """What each output held, read at one moment."""

    kafka: list[tuple[str, dict]]
    keystone: list[tuple[str, dict, dict]]
    es: dict[str, dict]
    hive: list[tuple[str, dict]]
    dead_letters: list[dict]
    metrics: str


@dataclass
class Routed:
    stack: Stack
    fronting: Fronting
    tables: Tables
    producer: DirectProducer | None = None
    # The first 1,500 events, and every output as it stood once it held them: the fault tests
    # add events, a replay after the SIGKILL test's crash may repeat some in the Kafka outputs
    # and the dead letters, and a restart starts the router's counts again.
    loaded: Fronting = field(default_factory=Fronting)
    at_load: Outputs | None = None

    @property
    def kafka(self) -> dict[str, Any]:
        return self.stack.kafka()

    @property
    def es(self) -> Connection:
        return Connection.of(self.stack.settings)

    def record(self, stream: str = STREAM) -> Path:
        return self.stack.state_dir / "run" / "routers" / f"{stream}.json"

    def router_pid(self, stream: str = STREAM) -> int | None:
        """The running router's pid, from the fleet's record of it (only read: the record is
        the fleet's, and it must see for itself that the process ended)."""
        deployed = Deployment.load(self.stack.settings, stream)
        return deployed.pid if deployed is not None and deployed.alive() else None

    def router(self, stream: str = STREAM) -> dict:
        shown = checked(self.stack.keystone("stream", "show", stream, "--json"))
        return json.loads(shown.stdout)["status"]["router"]

    def own_router(self) -> None:
        """The router a child of the control running now, which alone can tell how it ended: a
        control restarted meanwhile (another module's exclusive test) adopted it and could say
        only that its process ended. Such a router is killed once first, and the fleet starts
        one of its own."""
        control = PidFile(self.stack.settings.run_dir / "control.pid").running_pid()
        pid = self.router_pid()
        fields = stat_fields(pid) if pid is not None else None
        if fields is None or control is None or int(fields[1]) == control:  # [1]: its parent
            return
        os.killpg(pid, signal.SIGKILL)
        wait_for(
            "a router of the running control's own",
            lambda: self.router_pid() not in (None, pid) and self.router()["state"] == "running",
            timeout=240,
        )

    def kill_router(self) -> int:
        pid = self.router_pid()
        assert pid is not None
        os.killpg(pid, signal.SIGKILL)  # the router and its JVM
        return pid

    def send(self, count: int, start: int, stream: str = STREAM) -> list[str]:
        if self.producer is None:
            self.producer = DirectProducer(self.kafka, "rt_app")
        result = self.producer.send(stream, [event(n) for n in range(start, start + count)])
        assert len(result.guids) == count
        return result.guids

    def refresh(self) -> None:
        """Re-reads the fronting topic: the events and their metadata as the router sees them."""
        for message in read_topic(self.kafka, f"keystone.{STREAM}"):
            headers = {k: v.decode() for k, v in message.headers() or []}
            if headers.get("ks_app") != "rt_app":
                continue
            meta = {
                "guid": headers[envelope.GUID],
                "timestamp": int(headers[envelope.TIMESTAMP]),
                "host": headers[envelope.HOST],
                "app": headers[envelope.APP],
            }
            self.fronting.events[meta["guid"]] = (json.loads(message.value()), meta)

    # Reading each sink back: records by guid, with every copy (duplicates are counted).

    def kafka_output(self, stream: str = STREAM) -> list[tuple[str, dict]]:
        return [
            (m.key().decode(), json.loads(m.value()))
            for m in read_topic(self.kafka, f"{stream}.clicks")
        ]

    def keystone_output(self) -> list[tuple[str, dict, dict]]:
        out = []
        for m in read_topic(self.kafka, f"keystone.{TARGET}"):
            headers = {k: v.decode() for k, v in m.headers()}
            out.append((headers[envelope.GUID], json.loads(m.value()), headers))
        return out

    def es_output(self) -> dict[str, dict]:
        return dict(search_documents(self.es, f"{STREAM}-search-*", source=True))

    def hive_output(self) -> list[tuple[str, dict]]:
        rows = self.tables.read(f"keystone.{STREAM}__warehouse")
        return [(r["guid"], json.loads(r["record"])) for r in rows]

    def dead_letters(self) -> list[dict]:
        return [
            {
                "value": m.value(),
                "headers": {k: v.decode() for k, v in m.headers() or []},
            }
            for m in read_topic(self.kafka, f"keystone.{STREAM}.dlq")
        ]

    def metrics(self) -> str:
        target = self.stack.state_dir / "prometheus" / "targets" / f"router-{STREAM}.json"
        address = json.loads(target.read_text())[0]["targets"][0]
        return http.client().get(f"http://{address}/metrics", timeout=10).text


def wait_for(what: str, done: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"{what}: not done within {timeout:.0f} s"
        time.sleep(2)


def realtime_outputs_caught_up(routed: Routed) -> bool:
    clicks = routed.fronting.expected("clicks")
    search = {g for g in routed.fronting.expected("search") if not _text_amount(routed, g)}
    errors = fitting(routed.fronting.expected("errors"))
    return (
        set(clicks) <= {g for g, _ in routed.kafka_output()}
        and search <= set(routed.es_output())
        and set(errors) <= {g for g, _, _ in routed.keystone_output()}
    )


def counted(metrics: str, output: str, stage: str) -> float:
    """The router's count of the output's events at `stage`, from its metrics' text."""
    labels = f'output="{output}",stage="{stage}",stream="{STREAM}"'
    prefix = f"keystone_router_events_total{{{labels}}} "
    lines = metrics.splitlines()
    return sum(float(line.split()[-1]) for line in lines if line.startswith(prefix))


def counts_caught_up(routed: Routed) -> bool:
    """Each output's count of what it delivered or dead-lettered has reached its first load."""
    text, expected = routed.metrics(), routed.loaded.expected

    def handled(output: str) -> float:
        return counted(text, output, "delivered") + counted(text, output, "dead_letter")

    return (
        handled("clicks") >= len(expected("clicks"))
        and handled("search") >= len(expected("search"))
        and handled("warehouse") >= 1500
        and handled("errors") >= len(expected("errors"))
        and counted(text, "_stream", "dead_letter") >= len(MALFORMED)
    )


def _text_amount(routed: Routed, guid: str) -> bool:
    return isinstance(routed.fronting.events[guid][0]["amount"], str)


@pytest.fixture(scope="module")
def routed(stack: Stack) -> Iterator[Routed]:
    spec_file = stack.state_dir / "rt_spec.json"
    spec_file.write_text(json.dumps(SPEC))
    target_file = stack.state_dir / "rt_target.json"
    target_file.write_text(json.dumps({"name": TARGET, "owner": "team-router", "partitions": 2}))
    checked(stack.keystone("app", "create", "rt_app"))  # it produces straight to Kafka
    checked(stack.keystone("stream", "create", "-f", str(target_file)))
    checked(stack.keystone("stream", "create", "-f", str(spec_file)))
    es = stack.address("elasticsearch")
    today = datetime.now(UTC)
    for day in (today, today + timedelta(days=1)):  # the daily index, midnight included
        index = f"{STREAM}-search-{day:%Y.%m.%d}"
        assert http.client().put(f"{es}/{index}", json=MAPPING, timeout=30).status_code == 200
    registry = RegistryReader.connect(stack.settings)
    key = registry.hashing_key(STREAM)
    registry.close()
    handle = Routed(stack, Fronting(key=key), Tables(stack))
    # The first load, which the first three tests check, whatever ran before them.
    handle.send(1500, start=0)
    produce(
        handle.stack.settings,
        f"keystone.{STREAM}",
        [(value, headers) for value, headers, _ in MALFORMED],
    )
    handle.refresh()
    handle.loaded = Fronting(dict(handle.fronting.events), key)
    search = handle.loaded.expected("search")
    letters = len(MALFORMED) + sum(1 for g in search if _text_amount(handle, g)) + 1
    wait_for("realtime outputs", lambda: realtime_outputs_caught_up(handle), timeout=240)
    wait_for("hive", lambda: len(handle.hive_output()) >= 1500, timeout=120)
    wait_for("dead letters", lambda: len(handle.dead_letters()) >= letters, timeout=60)
    # The router counts what its outputs did each second, a batch's as it ends: the counts
    # are read once each output's have come as far as its sink (the test checks they stop there).
    wait_for("the router's counts", lambda: counts_caught_up(handle), timeout=60)
    handle.at_load = Outputs(
        kafka=handle.kafka_output(),
        keystone=handle.keystone_output(),
        es=handle.es_output(),
        hive=handle.hive_output(),
        dead_letters=handle.dead_letters(),
        metrics=handle.metrics(),
    )
    yield handle
    handle.tables.close()
    for stream in (STREAM, TARGET):  # no router left running for the modules after this one
        stack.keystone("stream", "delete", stream)


def test_four_outputs_hold_exactly_what_the_python_evaluator_expects(routed: Routed) -> None:
    loaded, held = routed.loaded, routed.at_load
    assert len(loaded.events) == 1500

    clicks = loaded.expected("clicks")
    assert 0 < len(clicks) < 1500
    assert dict(held.kafka) == clicks
    assert Counter(g for g, _ in held.kafka).most_common(1)[0][1] == 1

    hive = held.hive
    assert dict(hive) == loaded.expected("warehouse")
    assert len(hive) == 1500  # no row twice
    assert all("country" not in r["user"] and r["kind"].startswith("**") for _, r in hive)

    search = loaded.expected("search")
    refused = {g for g in search if _text_amount(routed, g)}
    assert refused and len(search) > len(refused)
    assert held.es == {g: r for g, r in search.items() if g not in refused}

    errors = fitting(loaded.expected("errors"))
    assert len(errors) == len(loaded.expected("errors")) - 1  # OVERSIZE's
    forwarded = held.keystone
    assert {g: r for g, r, _ in forwarded} == errors and len(forwarded) == len(errors)
    assert {(h["ks_hops"], h["ks_stream"], h["ks_app"]) for _, _, h in forwarded} == {
        ("1", TARGET, "rt_app")
    }


def test_unreadable_events_and_refused_documents_reach_the_dead_letter_topic(
    routed: Routed,
) -> None:
    loaded, letters = routed.loaded, routed.at_load.dead_letters
    search = loaded.expected("search")
    refused = {g for g in search if _text_amount(routed, g)}
    wanted = len(MALFORMED) + len(refused) + 1  # and OVERSIZE's record from `errors`
    stream_level = [d for d in letters if "ks_dlq_output" not in d["headers"]]
    assert len(stream_level) == len(MALFORMED)
    for letter, (value, _, reason) in zip(
        sorted(stream_level, key=lambda d: d["value"]), sorted(MALFORMED), strict=True
    ):
        assert letter["value"] == value
        assert letter["headers"]["ks_dlq_reason"].startswith(reason)
    from_search = [d for d in letters if d["headers"].get("ks_dlq_output") == "search"]
    assert {d["headers"]["ks_guid"] for d in from_search} == refused
    for letter in from_search:
        assert "mapper_parsing_exception" in letter["headers"]["ks_dlq_reason"]
        payload, _ = loaded.events[letter["headers"]["ks_guid"]]
        assert json.loads(letter["value"]) == payload  # the original bytes, not the record
    [oversize] = [d for d in letters if d["headers"].get("ks_dlq_output") == "errors"]
    payload, _ = loaded.events[oversize["headers"]["ks_guid"]]
    assert payload["n"] == OVERSIZE and json.loads(oversize["value"]) == payload
    size = len(json.dumps(loaded.expected("errors")[oversize["headers"]["ks_guid"]]))
    reason = oversize["headers"]["ks_dlq_reason"]
    assert reason.startswith("the output record is ") and f"limit of {MAX_EVENT_BYTES}" in reason
    assert abs(int(reason.split()[4]) - size) < 100, (reason, size)
    assert len(letters) == wanted  # no dead letter twice


def test_metrics_count_every_stage_of_every_output(routed: Routed) -> None:
    text = routed.at_load.metrics
    expected = routed.loaded.expected

    def value(output: str, stage: str) -> float:
        return counted(text, output, stage)

    search_refused = sum(1 for g in expected("search") if _text_amount(routed, g))
    assert value("clicks", "delivered") == len(expected("clicks"))
    assert value("clicks", "matched") == len(expected("clicks"))
    assert value("search", "matched") == len(expected("search"))
    assert value("search", "delivered") == len(expected("search")) - search_refused
    assert value("search", "dead_letter") == search_refused
    assert value("warehouse", "delivered") == 1500
    assert value("errors", "matched") == len(expected("errors"))
    assert value("errors", "delivered") == len(fitting(expected("errors")))
    assert value("errors", "dead_letter") == 1
    assert value("_stream", "dead_letter") == len(MALFORMED)
    assert value("clicks", "in") == 1500 + len(MALFORMED)
    assert f'keystone_router_up{{stream="{STREAM}"}} 1.0' in text
    assert f'keystone_delivery_latency_seconds_count{{output="search",stream="{STREAM}"}}' in text


def test_sigkill_mid_stream_then_restart_loses_nothing_and_duplicates_only_in_kafka(
    routed: Routed,
) -> None:
    routed.own_router()
    routed.refresh()
    before, restarts = len(routed.fronting.events), routed.router()["restarts"]
    first = 1500  # past the fixture's events (the ES outage test's start at 100,000)
    sending = threading.Event()
    sending.set()
    sent = [first]

    def load() -> None:  # KAFKA_RATE events per second, in tenths of a second
        while sending.is_set():
            routed.send(KAFKA_RATE // 10, start=sent[0])
            sent[0] += KAFKA_RATE // 10
            time.sleep(0.1)

    thread = threading.Thread(target=load)
    thread.start()
    try:
        time.sleep(12)
        killed = routed.kill_router()
        wait_for(
            "the fleet to start the router again",
            lambda: routed.router_pid() not in (None, killed),
            timeout=30,
        )
        time.sleep(10)
    finally:
        sending.clear()
        thread.join(timeout=60)
    router = routed.router()
    assert router["restarts"] == restarts + 1
    assert router["last_error"].startswith("exited with -9")
    routed.refresh()
    total = len(routed.fronting.events)
    assert total == before + sent[0] - first and sent[0] - first > 1000
    wait_for("realtime outputs", lambda: realtime_outputs_caught_up(routed), timeout=240)
    wait_for("hive", lambda: len({g for g, _ in routed.hive_output()}) >= total, timeout=180)

    hive = routed.hive_output()
    assert len(hive) == total, f"{len(hive) - total} duplicate rows in Hive"
    assert {g for g, _ in hive} == set(routed.fronting.events)
    search = routed.fronting.expected("search")
    assert set(routed.es_output()) == {g for g in search if not _text_amount(routed, g)}

    copies = Counter(g for g, _ in routed.kafka_output())
    assert set(copies) == set(routed.fronting.expected("clicks"))
    duplicates = sum(c - 1 for c in copies.values())
    # At least once: what the killed router wrote after its last checkpoint comes again: at
    # most one checkpoint interval of traffic, plus the 3 s the fleet takes to notice (1 s) and
    # to start it again (a 1 s backoff).
    clicks_share = len(copies) / total
    assert duplicates <= KAFKA_RATE * (CHECKPOINT_SECONDS + 3) * clicks_share + 10, duplicates
    print(f"kafka duplicates after SIGKILL: {duplicates} of {len(copies)}")


@pytest.mark.exclusive  # it stops or restarts a service every test uses
def test_elasticsearch_outage_stalls_only_its_output_then_it_catches_up(routed: Routed) -> None:
    pidfile = PidFile(routed.stack.state_dir / "run" / "elasticsearch.pid")
    routed.refresh()
    before = len(routed.fronting.events)
    assert stop(pidfile, signal.SIGTERM, timeout=60)
    try:
        routed.send(600, start=100_000)
        routed.refresh()
        clicks = set(routed.fronting.expected("clicks"))
        wait_for(
            "the Kafka output while Elasticsearch is down",
            lambda: clicks <= {g for g, _ in routed.kafka_output()},
            timeout=90,
        )
    finally:
        checked(routed.stack.keystone("stack", "up", timeout=300))
    assert len(routed.fronting.events) == before + 600
    search = {g for g in routed.fronting.expected("search") if not _text_amount(routed, g)}
    wait_for("elasticsearch after the outage", lambda: search <= set(routed.es_output()), 240)
    assert set(routed.es_output()) == search


def test_deleting_a_stream_stops_its_router_gracefully(routed: Routed, unique: str) -> None:
    """A stream of its own (the other tests' goes on), the module's outputs but the one into
    the target stream, its router running and delivering when it is deleted."""
    stream = f"rt_gone_{unique}"
    state = routed.stack.state_dir
    spec_file = state / f"{stream}.json"
    outputs = [o for o in SPEC["outputs"] if o["sink"]["type"] != "keystone"]
    spec_file.write_text(json.dumps({**SPEC, "name": stream, "outputs": outputs}))
    checked(routed.stack.keystone("stream", "create", "-f", str(spec_file)))
    try:
        wait_for("its router", lambda: routed.router(stream)["state"] == "running", 180)
        guids = routed.send(40, start=0, stream=stream)
        kept = parse_filter(outputs[0]["filter"])  # `clicks`
        clicks = {g for n, g in enumerate(guids) if matches(kept, event(n), {})}
        wait_for(
            "its events delivered",
            lambda: clicks <= {g for g, _ in routed.kafka_output(stream)},
            timeout=120,
        )
        target = state / "prometheus" / "targets" / f"router-{stream}.json"
        assert target.exists() and (state / "checkpoints" / stream).is_dir()
        pid = routed.router_pid(stream)
        assert pid is not None
        checked(routed.stack.keystone("stream", "delete", stream))
        wait_for("the router to stop", lambda: not alive(pid), timeout=90)
        # Its JVM and Python workers end with it (or the fleet ends them on its next pass).
        wait_for("its process group to end", lambda: groups_alive([pid]) == [], timeout=30)
        log = state / "logs" / "routers" / f"{stream}.log"
        assert log.read_text().rstrip().endswith(f"router for {stream} stopped")  # SIGTERM path
        wait_for("the fleet to undeploy it", lambda: not target.exists(), timeout=30)
        assert not (state / "checkpoints" / stream).exists()
        assert not routed.record(stream).exists()
    finally:
        routed.stack.keystone("stream", "delete", stream)  # when the test failed before
