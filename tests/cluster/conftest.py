"""The cluster stack (issue 33): the embedded stack with two fronting Kafka clusters of three
brokers each, a Spark standalone master and two workers running every router, and two control
processes, started
once for the tests of this package, which run first, beside the tests that need no stack
(tests/support/parallel.py): it is down again before the suite's own stack starts, so the
machine runs one stack at a time. Its ports are the
defaults moved by 12,000, below the kernel's ephemeral ports (32768 and up), which an outgoing
connection may hold at any moment."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.api import Api
from tests.support.browser import artifact
from tests.support.parallel import cluster_stack_down
from tests.support.stack import Stack, checked, private_state_dir, stack_env

CLUSTER = {
    "KEYSTONE_KAFKA_BROKERS": "3",
    "KEYSTONE_SPARK_CLUSTER": "standalone",
    "KEYSTONE_SPARK_WORKERS": "2",
    "KEYSTONE_CONTROL_REPLICAS": "2",
    "KEYSTONE_ALERTMANAGER_REPLICAS": "2",  # two peers, gossiping
    "KEYSTONE_KAFKA_SECURITY": "plaintext",  # the default's proof (the suite's stack is secured)
    # Two fronting clusters of three brokers each, failed over by the fleet's leader when one
    # is lost (its default: 3 s), as production would run them (tests/cluster/test_nodes.py).
    "KEYSTONE_FRONTING_CLUSTERS": "east,west",
    "KEYSTONE_FRONTING_FAILOVER_AFTER_SECONDS": "3",
}


@pytest.fixture(scope="package")
def cluster(request: pytest.FixtureRequest) -> Iterator[Stack]:
    state_dir = private_state_dir()
    env = stack_env(state_dir, port_offset=12000)
    env.pop("KEYSTONE_SPARK_MASTER")  # the cluster's own master
    handle = Stack(env={**env, **CLUSTER}, state_dir=state_dir)
    failed, up = request.session.testsfailed, False
    try:
        checked(handle.keystone("stack", "up", timeout=900))
        up = True
        yield handle
    finally:
        try:  # all of it down, or the suite's stack would start beside what is left
            if not up or request.session.testsfailed > failed:
                _keep_logs(state_dir)  # before the purge removes them
            checked(handle.keystone("stack", "down", "--purge", timeout=600))
        finally:
            shutil.rmtree(state_dir, ignore_errors=True)
            cluster_stack_down(request.config)


@pytest.fixture(scope="package")
def cluster_admin(cluster: Stack) -> Api:
    token = (cluster.state_dir / "conf" / "control" / "admin-token").read_text().strip()
    return Api(cluster.settings.control_urls[0], token)


def _keep_logs(state_dir: Path) -> None:
    """The cluster stack's logs and its Spark executors' (the routers' tasks log there), as
    test artifacts: a failure here is seldom seen again on demand."""
    kept = artifact("cluster-stack-logs")
    try:
        shutil.rmtree(kept, ignore_errors=True)
        shutil.copytree(state_dir / "logs", kept, dirs_exist_ok=True)
        for stderr in (state_dir / "data").glob("spark-worker-*/app-*/*/stderr"):
            target = kept / "executors" / stderr.relative_to(state_dir / "data").parent
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy(stderr, target / "stderr")
    except OSError as e:  # the stack still goes down, and the suite's stack may start
        print(f"the cluster stack's logs not kept: {e}")
