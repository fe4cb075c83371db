"""Nodes killed under load on the cluster stack: `keystone loadtest` through the proxy while one
broker is killed with SIGKILL, then the leader of the stream's first partition, then a Spark
worker with its executors (each started again after a while), then every broker of the fronting
cluster taking the writes (the fleet's leader moves them to the other, and they are moved back
by command once it returns). The proxy answers 202, or 503 with Retry-After, and nothing else;
every acknowledged event is in a fronting topic and in every output (the audit, guid by guid);
Elasticsearch and Hive hold none twice; the router's queries went on through the worker's death
(the same driver process throughout). One load for all four: a load's start and its audit
(a Spark application) fewer. Then the control process leading the fleet is killed: the other
takes the fleet over within the lease's time, keeps the routers it finds (the same
processes), and deploys a stream created afterwards."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from keystone.contracts import http, kafka_clients
from keystone.contracts.names import fronting_topic
from keystone.contracts.processes import PidFile
from keystone.control.fleet import LEASE_SECONDS, PASS_SECONDS
from keystone.control.launcher import Deployment
from keystone.stack.services import Alertmanager
from tests.support.api import Api
from tests.support.stack import Stack, checked
from tests.support.waiting import eventually

STREAM, LATE = "cl_main", "cl_late"
OUTPUTS = [
    {
        "name": "picked",
        "filter": "level != 'info'",
        "sink": {"type": "kafka"},
        "delivery": {"mode": "realtime", "trigger": "5 seconds"},
    },
    {"name": "search", "projection": ["title", "country"], "sink": {"type": "elasticsearch"}},
    {
        "name": "warehouse",
        "sink": {"type": "hive"},
        "delivery": {"mode": "microbatch", "trigger": "5 seconds"},
    },
]


def running(api: Api, stream: str) -> bool:
    return api.ok("GET", f"/v1/streams/{stream}/status")["router"]["state"] == "running"


@pytest.fixture(scope="module")
def streams(cluster: Stack, cluster_admin: Api) -> Iterator[None]:
    spec = {"name": STREAM, "owner": "team-cluster", "partitions": 3, "outputs": OUTPUTS}
    cluster_admin.ok("PUT", f"/v1/streams/{STREAM}", {**spec, "archive": {"enabled": False}})
    eventually("the router", lambda: running(cluster_admin, STREAM), timeout=240)
    yield
    for name in (STREAM, LATE):
        cluster_admin.call("DELETE", f"/v1/streams/{name}")


def master_state(cluster: Stack) -> dict:
    settings = cluster.settings
    url = f"http://{settings.bind_host}:{settings.spark_master_ui_port}/json/"
    return http.client().get(url, timeout=10).json()


def test_every_node_is_listed_healthy_and_topics_live_on_three_brokers(
    cluster: Stack, streams: None
) -> None:
    services = cluster.status()["services"]
    for name in ("kafka", "kafka-2", "kafka-3", "spark-master", "spark-worker-1", "control-2"):
        assert services[name]["health"] == "healthy" and services[name]["pid"], name
    assert "spark-worker-2" in services

    # The Alertmanager peers found each other: a silence or a notification is known to both.
    def gossiping() -> bool:
        for url in cluster.settings.alertmanager_urls:
            answer = http.client().get(
                f"{url}/api/v2/status", timeout=10, auth=cluster.settings.alertmanager_auth()
            )
            status = answer.json()["cluster"]
            if status["status"] != "ready" or len(status["peers"]) != 2:
                return False
        return True

    eventually("the Alertmanager peers to gossip", gossiping, 60)
    # In mutual TLS: a process without the peers' certificate is refused.
    peer = Alertmanager(cluster.settings)
    context = ssl.create_default_context(cafile=peer.gossip_tls_dir / "ca.pem")
    host = cluster.settings.bind_host
    with (
        pytest.raises(ssl.SSLError, match="CERTIFICATE"),  # the refusal comes on reading
        socket.create_connection((host, peer.ports[1]), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as stranger,
    ):
        stranger.sendall(b"a silence of every alert")
        stranger.recv(1)
    admin = AdminClient(kafka_clients.librdkafka(cluster.settings))
    topic = fronting_topic(STREAM)
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
    assert all(sorted(p.replicas) == [1, 2, 3] and len(p.isrs) == 3 for p in partitions)
    resource = ConfigResource("topic", topic)
    config = admin.describe_configs([resource])[resource].result()
    assert config["min.insync.replicas"].value == "2"


def lossless_load(cluster: Stack, report: Path, seconds: int, *faults: str) -> dict:
    """`keystone loadtest` through the proxy at 150 events/s with `faults`, its figures, once
    they say what every fault of this module must leave: 202, or 503 saying when to come back
    (never another answer, never an event given up), and every acknowledged event at every
    output, once in Elasticsearch and Hive."""
    result = checked(
        cluster.keystone(
            "loadtest",
            *("--stream", STREAM, "--rate", "150", "--duration", str(seconds), "--producers", "2"),
            *("--event-size", "500", "--report", str(report), "--json"),
            *faults,
            timeout=1200,
        )
    )
    figures = json.loads(result.stdout)
    ingest, audit = figures["ingest"], figures["audit"]
    assert set(ingest["responses"]) <= {"202", "503"}, ingest["responses"]
    assert ingest["unavailable_without_retry_after"] == 0
    assert (ingest["rejected"], ingest["abandoned"]) == (0, 0)
    assert ingest["acknowledged"] == ingest["attempted"]
    assert audit["missing_at_ingest"] == 0 and audit["drained"] and audit["lossless"], audit
    for output in audit["outputs"]:
        assert output["lost"] == 0 and output["delivery_rate"] == 1.0, output
        if output["sink"] in ("elasticsearch", "hive"):
            assert output["duplicates"] == 0, output
    return figures


def test_nodes_and_then_a_whole_fronting_cluster_killed_under_load_lose_no_event(
    cluster: Stack, streams: None, tmp_path: Path
) -> None:
    """One load, four faults: a broker of east killed, then the leader of the stream's first
    partition, then a Spark worker with its executors, each started again after a while; then
    every broker of east: the fleet's leader moves the writes to west within seconds, the
    proxy answers 503 with Retry-After meanwhile, the router routes what west took; east is
    started again and the writes moved back by command. The audit, guid by guid, reads both
    clusters' topics and every output."""
    apps = [a["name"] for a in master_state(cluster)["activeapps"]]
    assert f"keystone-router-{STREAM}" in apps  # the router runs on the cluster
    driver = Deployment.load(cluster.settings, STREAM)
    assert driver is not None
    figures = lossless_load(
        cluster,
        tmp_path,
        120,
        # Apart by more than a restart takes here (a broker's 10 to 20 s, a worker's 20 s).
        *("--fault", "kill-broker:2@8+10", "--fault", "kill-broker@32+10"),
        *("--fault", "kill-spark-worker:1@54+15", "--fault", "kill-fronting-cluster@80+25"),
    )
    *nodes, lost = figures["faults"]
    notes = {f["what"]: f["notes"] for f in nodes}
    assert len(notes) == 3 and all(any("killed" in n for n in v) for v in notes.values()), notes
    assert all(any("healthy again" in n for n in v) for v in notes.values()), notes
    # The worker's death cost the router executors, not its driver: Spark rescheduled.
    after = Deployment.load(cluster.settings, STREAM)
    assert after is not None and after.pid == driver.pid
    states = {w["port"]: w["state"] for w in master_state(cluster)["workers"]}
    assert list(states.values()).count("ALIVE") == 2, states
    said = " | ".join(lost["notes"])
    moved = re.search(r"moved the writes to west ([\d.]+) s after", said)
    reached = re.search(r"the first event reached west ([\d.]+) s after the kill", said)
    # Noted only within the fault's 25 s: the leader moved them, not the failback. How soon
    # is the benchmark's to measure (docs/benchmarks.md, "A fronting cluster lost").
    assert moved and reached and "failed back to east by command" in said, said
    view = cluster.keystone("fronting", "status", "--json")
    assert json.loads(checked(view).stdout)["active"] == "east"


def test_the_fleet_fails_over_to_the_other_control_process_and_keeps_its_routers(
    cluster: Stack, cluster_admin: Api, streams: None
) -> None:
    settings = cluster.settings
    urls = settings.control_urls
    assert len(urls) == 2

    def leader() -> int | None:
        for index, url in enumerate(urls):
            try:
                if http.client().get(f"{url}/readyz", timeout=2).json()["fleet_leader"]:
                    return index
            except (httpx.HTTPError, ValueError):
                continue
        return None

    eventually("a fleet leader", lambda: leader() is not None, timeout=60)
    leading = leader()
    assert leading is not None
    routers = Deployment.load(settings, STREAM)
    assert routers is not None
    service = "control" if leading == 0 else f"control-{leading + 1}"
    pid = PidFile(settings.run_dir / f"{service}.pid").running_pid()
    assert pid is not None
    killed = time.monotonic()
    os.killpg(pid, signal.SIGKILL)
    other = 1 - leading
    eventually("the other control process to lead", lambda: leader() == other, timeout=60)
    took = time.monotonic() - killed
    assert took <= LEASE_SECONDS + 3 * PASS_SECONDS, took
    # It adopted the running router: the same process, not a second one.
    time.sleep(3 * PASS_SECONDS)
    again = Deployment.load(settings, STREAM)
    assert again is not None and again.pid == routers.pid and again.alive()
    apps = [a["name"] for a in master_state(cluster)["activeapps"]]
    assert apps.count(f"keystone-router-{STREAM}") == 1, apps
    # API writes go on through the survivor, and its fleet deploys what they ask.
    survivor = Api(urls[other], cluster_admin.token)
    late = {"name": LATE, "owner": "team-cluster", "outputs": OUTPUTS[:1]}
    survivor.ok("PUT", f"/v1/streams/{LATE}", {**late, "archive": {"enabled": False}})
    eventually("the late stream's router", lambda: running(survivor, LATE), timeout=240)
    checked(cluster.keystone("stack", "up", timeout=300))  # the killed one back
    assert leader() == other  # it stays the follower: no flapping
