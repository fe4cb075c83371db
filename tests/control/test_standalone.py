"""The same fleet on a real Spark cluster: a Spark standalone master and worker from the pyspark
distribution, control restarted with `KEYSTONE_SPARK_MASTER=spark://...`, and a stream whose
router the fleet then runs as an application of that cluster, delivering events."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from pyspark.find_spark_home import _find_spark_home

from keystone.contracts.processes import PidFile, stop
from keystone.ingest_proxy.client import ProxyClient
from keystone.loadtest.run import await_key
from keystone.loadtest.topics import read_topic
from tests.support.api import Api, owner
from tests.support.stack import Stack, checked
from tests.support.waiting import eventually

STREAM = "on_cluster"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cluster:
    master: str  # spark://host:port
    ui: str  # the master's web UI, whose /json/ describes workers and applications

    def state(self) -> dict:
        response = httpx.get(f"{self.ui}/json/", timeout=10)
        response.raise_for_status()
        return response.json()


def spark_class(stack: Stack, name: str, *args: str) -> subprocess.Popen:
    log = (stack.state_dir / "logs" / f"spark-{name.rsplit('.', 1)[-1].lower()}.log").open("w")
    env = {**stack.env, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_HOME": _find_spark_home()}
    return subprocess.Popen(
        [f"{_find_spark_home()}/bin/spark-class", name, *args],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


@pytest.fixture(scope="module")
def cluster(stack: Stack) -> Iterator[Cluster]:
    port, ui = free_port(), free_port()
    master = spark_class(
        stack,
        "org.apache.spark.deploy.master.Master",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--webui-port",
        str(ui),
    )
    handle = Cluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}")
    work = stack.state_dir / "spark-worker"
    worker = spark_class(
        stack,
        "org.apache.spark.deploy.worker.Worker",
        "--host",
        "127.0.0.1",
        "--cores",
        "4",
        "--memory",
        "3g",
        "--webui-port",
        "0",
        "--work-dir",
        str(work),
        handle.master,
    )
    try:
        eventually("a live worker", lambda: _alive_workers(handle) == 1, timeout=90)
        yield handle
    finally:
        for process in (worker, master):
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=60)


def _alive_workers(cluster: Cluster) -> int:
    try:
        return sum(1 for w in cluster.state()["workers"] if w["state"] == "ALIVE")
    except (httpx.HTTPError, ValueError):  # the UI answers before its JSON is ready
        return 0


def restart_control(stack: Stack, master: str) -> None:
    stopped = stop(PidFile(stack.state_dir / "run" / "control.pid"), signal.SIGTERM, timeout=30)
    checked(  # up even when the stop failed: control is never left down
        Stack({**stack.env, "KEYSTONE_SPARK_MASTER": master}, stack.state_dir).keystone(
            "stack", "up", timeout=300
        )
    )
    assert stopped


def test_the_fleet_runs_a_router_on_a_spark_standalone_cluster(
    stack: Stack, admin: Api, cluster: Cluster
) -> None:
    try:
        restart_control(stack, cluster.master)
        _runs_a_router_on_the_cluster(stack, admin, cluster)
    finally:  # control back on its own master, for the tests after this one, whatever failed
        restart_control(stack, stack.env["KEYSTONE_SPARK_MASTER"])
    assert json.dumps(cluster.state()["activeapps"]).count(f"keystone-router-{STREAM}") == 0


def _runs_a_router_on_the_cluster(stack: Stack, admin: Api, cluster: Cluster) -> None:
    team = owner(admin, "team-cluster")
    key = team.ok("POST", "/v1/apps", {"name": "cluster-app"})["key"]
    output = {
        "name": "copy",
        "filter": "n >= 50",
        "projection": ["guid", "n"],
        "sink": {"type": "kafka"},
        "delivery": {"mode": "realtime", "trigger": "5 seconds"},
        "start": "earliest",
    }
    spec = {
        "name": STREAM,
        "owner": "team-cluster",
        "partitions": 2,
        "producers": ["cluster-app"],
        "outputs": [output],
    }
    try:
        team.ok("POST", "/v1/streams", spec)
        await_key(stack.address("ingest_proxy"), key, STREAM)  # every proxy process knows both
        with ProxyClient(stack.address("ingest_proxy"), key) as proxy:
            guids = proxy.send(STREAM, [{"n": n} for n in range(100)]).guids
        wanted = set(guids[50:])

        def delivered() -> set[str]:
            return {m.key().decode() for m in read_topic(stack.address("kafka"), f"{STREAM}.copy")}

        eventually("delivery through the cluster", lambda: delivered() >= wanted, timeout=180)
        assert delivered() == wanted
        [application] = [
            a for a in cluster.state()["activeapps"] if a["name"] == f"keystone-router-{STREAM}"
        ]
        assert application["state"] == "RUNNING" and application["cores"] >= 2
        status = team.ok("GET", f"/v1/streams/{STREAM}/status")
        assert status["router"]["state"] == "running"
    finally:
        team.call("DELETE", f"/v1/streams/{STREAM}")
        record = stack.state_dir / "run" / "routers" / f"{STREAM}.json"
        eventually("the router to stop", lambda: not Path(record).exists(), timeout=120)
