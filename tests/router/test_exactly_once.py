"""Exactly-once Kafka and Keystone outputs on the real stack (issue 32): under a steady load the
router is killed with SIGKILL at random moments, then the broker is restarted mid-stream, and a
`read_committed` reader finds every acknowledged event exactly once in the Kafka output's topic,
in the Keystone output's target stream and in that stream's own exactly-once output. A sink task
made to fail once (the writer's test-only fault switch), before its commit and after it, leaves
no duplicate either, nor does a partition added to the fronting topic.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from keystone.contracts import envelope, http
from keystone.contracts.checkpoints import checkpoint_dir, generations
from keystone.contracts.errors import KeystoneError
from keystone.contracts.metrics import ROUTER_TRANSACTIONS as TRANSACTIONS
from keystone.contracts.names import fronting_topic, transactional_group
from keystone.contracts.processes import PidFile, stop
from keystone.control.launcher import Deployment
from keystone.ingest_proxy.client import DirectProducer
from keystone.router.topics import read_topic
from tests.support.api import Api, owner
from tests.support.stack import Stack, checked
from tests.support.waiting import eventually

STREAM, TARGET, OWNER, APP = "eo_main", "eo_next", "team-eo", "eo_app"
EXACTLY_ONCE = {"mode": "microbatch", "trigger": "2 seconds", "guarantee": "exactly_once"}
RATE = 200  # events per second while loaded
KILLS = 3
SKIPPED = "were committed before, not written again"  # the router's log, of a batch run again


def specs() -> tuple[dict, dict]:
    target = {
        "name": TARGET,
        "owner": OWNER,
        "partitions": 2,
        "archive": {"enabled": False},
        "outputs": [
            {
                "name": "copy",
                "sink": {"type": "kafka"},
                "delivery": EXACTLY_ONCE,
                "start": "earliest",
            }
        ],
    }
    main = {
        "name": STREAM,
        "owner": OWNER,
        "partitions": 2,
        "producers": [APP],
        "archive": {"enabled": False},
        "outputs": [
            {
                "name": "clicks",
                "sink": {"type": "kafka"},
                "projection": ["n", "kind"],
                "delivery": EXACTLY_ONCE,
                "start": "earliest",
            },
            {
                "name": "onward",
                "filter": "kind = 'buy'",
                "sink": {"type": "keystone", "stream": TARGET},
                "delivery": EXACTLY_ONCE,
                "start": "earliest",
            },
        ],
    }
    return target, main


@dataclass
class Loaded:
    stack: Stack
    api: Api
    producer: DirectProducer
    acked: dict[str, dict] = field(default_factory=dict)  # guid -> event
    n: int = 0

    def send(self, count: int) -> None:
        events = [{"n": self.n + i, "kind": "buy" if i % 2 else "view"} for i in range(count)]
        self.n += count
        try:
            guids = self.producer.send(STREAM, events).guids
        except KeystoneError:
            return  # not acknowledged (the broker is away): maybe there, maybe not
        self.acked.update(zip(guids, events, strict=True))

    def router_pid(self, stream: str = STREAM) -> int | None:
        deployed = Deployment.load(self.stack.settings, stream)
        return deployed.pid if deployed is not None and deployed.alive() else None

    def copies(self) -> dict[str, Counter[str]]:
        """Per topic read back (read_committed), how many times each guid is there."""
        kafka = self.stack.kafka()

        def guids(topic: str) -> Counter[str]:
            return Counter(
                dict(m.headers())[envelope.GUID].decode() for m in read_topic(kafka, topic)
            )

        return {
            "clicks": guids(f"{STREAM}.clicks"),
            "onward": guids(fronting_topic(TARGET)),
            "copy": guids(f"{TARGET}.copy"),
        }

    def delivering(self) -> None:
        """Until the router (started again, say) has committed a second's worth of events."""
        topic, kafka = f"{STREAM}.clicks", self.stack.kafka()
        before = len(read_topic(kafka, topic))
        eventually(
            "the router to deliver",
            lambda: len(read_topic(kafka, topic)) >= before + RATE,
            timeout=120,
        )

    def expected(self) -> dict[str, set[str]]:
        buys = {g for g, e in self.acked.items() if e["kind"] == "buy"}
        return {"clicks": set(self.acked), "onward": buys, "copy": buys}

    def all_there(self) -> bool:
        copies, expected = self.copies(), self.expected()
        return all(expected[name] <= set(copies[name]) for name in expected)

    def exactly_once(self) -> None:
        """Every acknowledged event in each topic it belongs in, and no event twice."""
        eventually("every acknowledged event in every output", self.all_there, timeout=240)
        copies, expected = self.copies(), self.expected()
        for name, found in copies.items():
            twice = {g: n for g, n in found.items() if n > 1}
            assert not twice, f"{name}: {len(twice)} events more than once"
            assert expected[name] <= set(found), name

    def transactions(self, outcome: str) -> float:
        """The router's count of its outputs' transactions, as Prometheus has it."""
        query = f'sum({TRANSACTIONS}{{stream="{STREAM}",outcome="{outcome}"}})'
        prometheus = self.stack.address("prometheus")
        answer = http.client().get(
            f"{prometheus}/api/v1/query", params={"query": query}, timeout=30
        )
        result = answer.json()["data"]["result"]
        return float(result[0]["value"][1]) if result else 0.0

    def group(self, output: str) -> str:
        """The output's transactional group now (its query's id is in its checkpoint)."""
        settings = self.stack.settings
        generation = max(generations(settings, STREAM, output), default=0)
        folder = checkpoint_dir(settings, STREAM, output, generation)
        query = json.loads((folder / "metadata").read_text())["id"]
        return transactional_group(STREAM, output, query)


@pytest.fixture(scope="module")
def loaded(stack: Stack, admin: Api) -> Iterator[Loaded]:
    team = owner(admin, OWNER)
    team.ok("POST", "/v1/apps", {"name": APP})
    target, main = specs()
    team.ok("POST", "/v1/streams", target)
    team.ok("POST", "/v1/streams", main)
    handle = Loaded(stack, team, DirectProducer(stack.kafka(), APP, ack_timeout=60))
    try:
        handle.send(50)
        eventually("both routers to deliver", handle.all_there, timeout=240)
        yield handle
    finally:
        team.call("DELETE", f"/v1/streams/{STREAM}")
        team.call("DELETE", f"/v1/streams/{TARGET}")


@pytest.mark.exclusive  # it stops or restarts a service every test uses
def test_kills_and_a_broker_restart_under_load_repeat_nothing_and_lose_nothing(
    loaded: Loaded,
) -> None:
    sending = threading.Event()
    sending.set()

    def load() -> None:  # RATE events a second, in tenths of a second
        while sending.is_set():
            loaded.send(RATE // 10)
            time.sleep(0.1)

    thread = threading.Thread(target=load)
    thread.start()
    rng = random.Random(32)
    try:
        for _ in range(KILLS):
            loaded.delivering()
            time.sleep(rng.uniform(0, 2))  # at a random moment of its 2-second batches
            killed = loaded.router_pid()
            assert killed is not None
            os.killpg(killed, signal.SIGKILL)  # the router and its JVM
            eventually(
                "the fleet to start the router again",
                lambda k=killed: loaded.router_pid() not in (None, k),
                timeout=60,
            )
        loaded.delivering()
        time.sleep(rng.uniform(0, 2))
        kafka = PidFile(loaded.stack.state_dir / "run" / "kafka.pid")
        assert stop(kafka, signal.SIGTERM, timeout=60)
        checked(loaded.stack.keystone("stack", "up", timeout=300))
        loaded.delivering()
    finally:
        sending.clear()
        thread.join(timeout=120)
    assert len(loaded.acked) > RATE * 20
    loaded.exactly_once()
    eventually("committed transactions counted", lambda: loaded.transactions("committed") > 0)


@pytest.mark.parametrize("point", ["after-send", "after-commit"])
def test_a_task_failing_once_around_its_commit_leaves_no_duplicate(
    loaded: Loaded, point: str
) -> None:
    faults = loaded.stack.state_dir / "faults"
    faults.mkdir(exist_ok=True)
    switches = [faults / f"{loaded.group('clicks')}.{p}.{point}" for p in (0, 1)]
    for switch in switches:
        switch.touch()
    log = loaded.stack.state_dir / "logs" / "routers" / f"{STREAM}.log"
    skipped, aborted = log.read_text().count(SKIPPED), loaded.transactions("aborted")
    loaded.send(200)
    eventually("both tasks to fail once", lambda: not any(s.exists() for s in switches), 120)
    loaded.send(20)  # after the failures: delivered by the query started again
    loaded.exactly_once()
    eventually("the aborted batch counted", lambda: loaded.transactions("aborted") > aborted)
    if point == "after-commit":  # the batch run again found its records committed
        assert log.read_text().count(SKIPPED) > skipped


def test_a_partition_added_to_the_fronting_topic_is_written_once_too(loaded: Loaded) -> None:
    """Its producer is new, with no position: it writes what the partition holds, once."""
    kafka, topic = loaded.stack.kafka(), fronting_topic(STREAM)
    admin = AdminClient(kafka)
    count = len(admin.list_topics(topic, timeout=30).topics[topic].partitions)
    for future in admin.create_partitions([NewPartitions(topic, count + 1)]).values():
        future.result(timeout=30)
    # A new producer: the fixture's has the topic's old metadata for minutes.
    loaded.producer = DirectProducer(kafka, APP, ack_timeout=60)
    loaded.send(300)
    assert any(m.partition() == count for m in read_topic(kafka, topic))
    loaded.exactly_once()
