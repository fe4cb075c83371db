"""The fleet on the real stack: a stream created through the API gets its router (a Spark
application) and its events arrive; a changed filter redeploys the router and takes effect; a
restarted control service adopts the running router instead of starting a second one.

(Killing a router and deleting a stream are proved in tests/router/test_router.py, whose
router the fleet runs too.) Each test stands alone, in any order: the first makes its own stream;
the other two share a second one (`redeployed`), whose output each reads from its spec as it is.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from keystone.contracts import http, metastore
from keystone.contracts.names import HIVE_DATABASE
from keystone.contracts.processes import PidFile, stop
from keystone.control.launcher import Deployment
from keystone.ingest_proxy.client import ProxyClient
from keystone.router.lang.evaluate import matches, project
from keystone.router.lang.parser import parse_filter, parse_projection
from keystone.router.topics import read_topic
from tests.support.api import Api, owner
from tests.support.processes import processes_mentioning
from tests.support.stack import Stack, checked
from tests.support.waiting import eventually

STREAM, REDEPLOYED, OWNER, APP = "fleet_main", "fleet_redeploy", "team-fleet", "fleet-app"
PICKED = {
    "name": "picked",
    "filter": "kind = 'a' and n >= 0",
    "projection": ["guid", "n", "user.id as uid"],
    "sink": {"type": "kafka"},
    "delivery": {"mode": "realtime", "trigger": "5 seconds"},
    "start": "earliest",
}
OUTPUTS = [
    PICKED,
    {
        "name": "search",
        "projection": ["n", "kind"],
        "sink": {"type": "elasticsearch"},
        "start": "earliest",
    },
    {
        "name": "warehouse",
        "sink": {"type": "hive"},
        "delivery": {"mode": "microbatch", "trigger": "5 seconds"},
        "start": "earliest",
    },
]


def event(n: int) -> dict:
    return {"n": n, "kind": "abc"[n % 3], "user": {"id": n % 7}}


@dataclass
class Fleet:
    stack: Stack
    api: Api
    proxy: ProxyClient
    sent: dict[str, dict] = field(default_factory=dict)  # guid -> event

    def send(self, numbers: range, stream: str = STREAM) -> list[str]:
        events = [event(n) for n in numbers]
        guids = self.proxy.send(stream, events).guids
        self.sent.update(zip(guids, events, strict=True))
        return guids

    def router(self, stream: str = STREAM) -> dict:
        return self.api.ok("GET", f"/v1/streams/{stream}/status")["router"]

    def pid(self, stream: str = STREAM) -> int | None:
        deployed = Deployment.load(self.stack.settings, stream)  # only read: it is the fleet's
        return deployed.pid if deployed is not None and deployed.alive() else None

    def running(self, stream: str = STREAM) -> bool:
        return self.router(stream)["state"] == "running"

    def picked(self, stream: str = STREAM) -> dict[str, list[dict]]:
        """Every copy in the Kafka output, by guid."""
        found: dict[str, list[dict]] = {}
        for m in read_topic(self.stack.kafka(), f"{stream}.picked"):
            found.setdefault(m.key().decode(), []).append(json.loads(m.value()))
        return found

    def output(self, stream: str, name: str) -> dict:
        """The output as the stream's spec has it now."""
        spec = self.api.ok("GET", f"/v1/streams/{stream}")["spec"]
        return next(o for o in spec["outputs"] if o["name"] == name)

    def expected(self, guids: list[str], output: dict) -> dict[str, dict]:
        expr, projection = parse_filter(output["filter"]), parse_projection(output["projection"])
        return {
            g: project(projection, self.sent[g], {"guid": g})
            for g in guids
            if matches(expr, self.sent[g], {"guid": g})
        }


@pytest.fixture(scope="module")
def fleet(stack: Stack, admin: Api) -> Iterator[Fleet]:
    team = owner(admin, OWNER)
    key = team.ok("POST", "/v1/apps", {"name": APP})["key"]
    with ProxyClient(stack.address("ingest_proxy"), key) as proxy:
        yield Fleet(stack, team, proxy)
    team.call("DELETE", f"/v1/streams/{STREAM}")


@pytest.fixture(scope="module")
def redeployed(fleet: Fleet) -> Iterator[str]:
    """A stream of the same outputs whose router runs, for the tests that change it or restart
    control under it (the first test's stream is made by that test)."""
    spec = {
        "name": REDEPLOYED,
        "owner": OWNER,
        "partitions": 2,
        "producers": [APP],
        "outputs": OUTPUTS,
        "archive": {"enabled": False},  # one query less to redeploy: the first test has one
    }
    fleet.api.ok("POST", "/v1/streams", spec)
    eventually("its router to run", lambda: fleet.running(REDEPLOYED), timeout=120)
    yield REDEPLOYED
    fleet.api.call("DELETE", f"/v1/streams/{REDEPLOYED}")


def test_a_stream_created_through_the_api_is_provisioned_deployed_and_delivers(
    fleet: Fleet,
) -> None:
    spec = {"name": STREAM, "owner": OWNER, "partitions": 2, "producers": [APP], "outputs": OUTPUTS}
    created = fleet.api.ok("POST", "/v1/streams", spec)
    assert {
        f"topic keystone.{STREAM} on east",  # the suite's stack has two fronting clusters
        f"topic keystone.{STREAM} on west",
        f"topic {STREAM}.picked",
        f"index template {STREAM}-search",
    } <= set(created["provisioned"])
    es = fleet.stack.address("elasticsearch")
    template = http.client().get(f"{es}/_template/{STREAM}-search", timeout=10).json()
    assert template[f"{STREAM}-search"]["index_patterns"] == [f"{STREAM}-search-*"]
    with metastore.thrift_client(fleet.stack.settings) as client:
        assert client.get_database(HIVE_DATABASE).name == HIVE_DATABASE

    eventually("the router to run", fleet.running, timeout=120)
    guids = fleet.send(range(300))
    wanted = fleet.expected(guids, PICKED)
    assert 0 < len(wanted) < 300
    eventually("the Kafka output", lambda: set(fleet.picked()) >= set(wanted), timeout=90)
    assert {g: copies[0] for g, copies in fleet.picked().items()} == wanted

    def searchable() -> int:
        http.client().post(f"{es}/{STREAM}-search-*/_refresh", timeout=30)
        return (
            http.client().get(f"{es}/{STREAM}-search-*/_count", timeout=30).json().get("count", 0)
        )

    eventually("the Elasticsearch output", lambda: searchable() == 300, timeout=90)

    def delivered() -> float | None:
        outputs = fleet.api.ok("GET", f"/v1/streams/{STREAM}/status")["outputs"]
        return {o["name"]: o["totals"].get("delivered") for o in outputs}["picked"]

    eventually("the status to count them", lambda: delivered() == len(wanted), timeout=60)
    fleet.api.call("DELETE", f"/v1/streams/{STREAM}")  # its router stops, not left to run on


def test_changing_an_output_filter_redeploys_the_router_and_takes_effect(
    fleet: Fleet, redeployed: str
) -> None:
    eventually("the router to run", lambda: fleet.running(redeployed), timeout=120)
    before = fleet.pid(redeployed)
    assert before is not None
    changed = {**PICKED, "filter": "kind = 'b'"}
    fleet.api.ok("PUT", f"/v1/streams/{redeployed}/outputs/picked", changed)
    eventually("the redeploy", lambda: fleet.pid(redeployed) not in (None, before), timeout=120)
    eventually("the new router to run", lambda: fleet.running(redeployed), timeout=120)
    guids = fleet.send(range(1000, 1150), redeployed)
    wanted = fleet.expected(guids, changed)
    eventually("the new filter's events", lambda: set(fleet.picked(redeployed)) >= set(wanted), 90)
    delivered = fleet.picked(redeployed)
    assert {g for g in guids if g in delivered} == set(wanted)  # not one of kind 'a'
    assert {g: delivered[g][0] for g in wanted} == wanted
    assert fleet.router(redeployed)["restarts"] == 0  # a redeploy is not a failure


@pytest.mark.exclusive  # it stops or restarts a service every test uses
def test_a_restarted_control_service_adopts_the_running_router(
    fleet: Fleet, redeployed: str
) -> None:
    eventually("the router to run", lambda: fleet.running(redeployed), timeout=120)
    pid = fleet.pid(redeployed)
    assert pid is not None
    control = PidFile(fleet.stack.state_dir / "run" / "control.pid")
    try:
        assert stop(control, signal.SIGTERM, timeout=30)
        assert fleet.pid(redeployed) == pid  # the router outlives control
    finally:
        checked(fleet.stack.keystone("stack", "up", timeout=300))  # control back, whatever failed
    time.sleep(5)  # several fleet passes
    assert fleet.pid(redeployed) == pid and fleet.running(redeployed)
    assert len(processes_mentioning(f"--stream\0{redeployed}\0")) == 1
    guids = fleet.send(range(2000, 2030), redeployed)
    # Its filter as it stands: the test that changes it may have run first.
    current = fleet.output(redeployed, "picked")["filter"]
    wanted = fleet.expected(guids, {**PICKED, "filter": current})
    eventually("events after the restart", lambda: set(fleet.picked(redeployed)) >= set(wanted), 60)
