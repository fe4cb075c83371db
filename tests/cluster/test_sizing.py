"""A router sized from its traffic, on the cluster stack: a stream at 500 events/s runs at the
smallest size; its rate raised tenfold, the fleet resizes it once (8,000 events/s: twice the
task slots on the cluster, bigger micro-batches) and redeploys it, and its output's lag comes
back under the stream's objective; the redeployed router is not resized again. (The rule's
hysteresis, down only on the last hour's peak and at most once in ten minutes, is proved with a
clock the test moves, in tests/control/test_sizing.py: on the stack, ten minutes would be waited
out in vain.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from keystone.contracts import http, kafka_clients
from keystone.control.launcher import Deployment
from keystone.ingest_proxy.client import DirectProducer
from tests.support.api import Api
from tests.support.stack import Stack
from tests.support.waiting import eventually

STREAM, APP = "cl_sized", "cl_sized_app"
LAG_OBJECTIVE = 100_000


class Load:
    """Events written straight to the fronting topic at a rate the test changes. It keeps the
    rate over time, not per tick: a send that waited for the brokers' acks (three of them,
    on two busy cores) makes the next one bigger, so the topic grows at `rate` as long as the
    brokers can take it, which is what the fleet's sizing reads."""

    TICK = 0.1

    def __init__(self, cluster: Stack) -> None:
        self.producer = DirectProducer(kafka_clients.librdkafka(cluster.settings), APP)
        self.rate = 0
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        owed, last = 0.0, time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            # Five seconds' owed at most: a send that waited two for acks is made up for, and
            # a lowered rate is not sent in one burst of the old one's.
            owed = min(owed + self.rate * (now - last), 5.0 * self.rate)
            last = now
            if batch := int(owed):
                self.producer.send(STREAM, [{"n": self.sent + i} for i in range(batch)])
                self.sent += batch
                owed -= batch
            self._stop.wait(max(0.0, self.TICK - (time.monotonic() - now)))

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture(scope="module")
def sized(cluster: Stack, cluster_admin: Api) -> Iterator[Api]:
    cluster_admin.call("POST", "/v1/apps", {"name": APP})
    output = {
        "name": "copy",
        "sink": {"type": "kafka"},
        "delivery": {"mode": "microbatch", "trigger": "2 seconds"},
    }
    spec = {
        "name": STREAM,
        "owner": "team-cluster",
        "partitions": 4,
        "producers": [APP],
        "outputs": [output],
        "archive": {"enabled": False},
        "objectives": {"lag_records": LAG_OBJECTIVE},
    }
    cluster_admin.ok("PUT", f"/v1/streams/{STREAM}", spec)
    yield cluster_admin
    cluster_admin.call("DELETE", f"/v1/streams/{STREAM}")


def router(api: Api) -> dict:
    return api.ok("GET", f"/v1/streams/{STREAM}/status")["router"]


def cores(cluster: Stack) -> int:
    """Cores the cluster's master gave the stream's router."""
    settings = cluster.settings
    state = (
        http.client()
        .get(f"http://{settings.bind_host}:{settings.spark_master_ui_port}/json/", timeout=10)
        .json()
    )
    return sum(a["cores"] for a in state["activeapps"] if a["name"] == f"keystone-router-{STREAM}")


def test_a_stream_whose_rate_rises_tenfold_is_resized_once(cluster: Stack, sized: Api) -> None:
    eventually("the router", lambda: router(sized)["state"] == "running", timeout=240)
    with Load(cluster) as load:
        load.rate = 500
        quiet: dict = {}

        def sampled() -> bool:  # the fleet samples the topic every 10 s
            quiet.update(router(sized))
            return 300 <= quiet["rate_per_second"] <= 700

        eventually("the quiet rate sampled", sampled, timeout=60, seen=lambda: quiet)
        assert (quiet["sized_for"], quiet["resizes"]) == (1_000, 0), quiet
        assert 300 <= quiet["rate_per_second"] <= 700, quiet
        assert cores(cluster) == 2  # the output's and the dead letters' micro-batches
        before = Deployment.load(cluster.settings, STREAM)
        assert before is not None

        load.rate = 5_000  # tenfold: 7,500 with headroom
        last: dict = {}

        def resized() -> bool:
            last.update(router(sized))
            return last["sized_for"] == 8_000

        eventually("the resize", resized, timeout=90, seen=lambda: (last, load.sent))
        eventually("the resized router", lambda: router(sized)["state"] == "running", 240)
        after = Deployment.load(cluster.settings, STREAM)
        assert after is not None and after.pid != before.pid  # redeployed with its new size
        assert cores(cluster) == 4  # twice the slots for each micro-batch query
        load.rate = 500  # back down: what the restart left behind is drained

        def caught_up() -> bool:
            status = sized.ok("GET", f"/v1/streams/{STREAM}/status")
            lag = status["outputs"][0]["lag"]
            return lag is not None and lag < LAG_OBJECTIVE

        eventually("the output's lag under its objective", caught_up, timeout=180)
    now = router(sized)
    assert (now["sized_for"], now["resizes"]) == (8_000, 1), now  # once, not back and forth
    assert now["peak_per_second"] >= 4_000, now
    again = Deployment.load(cluster.settings, STREAM)
    assert again is not None and again.pid == after.pid
