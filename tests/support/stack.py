"""The test stack's handle: its settings, its `keystone` command, separate Python processes
pointed at it, and commands run in this checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from prometheus_client.parser import text_string_to_metric_families

from keystone.contracts import http, kafka_clients
from keystone.contracts.metrics import INGEST_REGISTRY_VERSION
from keystone.contracts.registry import RegistryReader
from keystone.contracts.settings import Settings
from tests.support.waiting import eventually

CHECKOUT = Path(__file__).resolve().parents[2]


KEYSTONE = str(Path(sys.executable).parent / "keystone")
SMTP_PORT = 19025  # + the stack's port offset: tests/alerts/' SMTP server (no service's port)


def stack_env(state_dir: Path, port_offset: int) -> dict[str, str]:
    """KEYSTONE_* variables for a stack in `state_dir` with every default port moved."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTONE_")}
    env["KEYSTONE_STATE_DIR"] = str(state_dir)
    env["KEYSTONE_CACHE_DIR"] = str(Settings().cache_dir)  # share the downloaded jars
    env["KEYSTONE_SPARK_MASTER"] = "local[2]"
    # The suite's Spark applications are many and short-lived, on two cores: the quick
    # compiler alone starts each on 40% less CPU (measured: 8 CPU-s against 13 for a session,
    # a query and its stop), and the serial collector, without G1's concurrent threads, on 8%
    # less again (5.7 CPU-s against 6.2, the medians of three interleaved runs of a session,
    # two small jobs and its stop). The suite's machine is busy from end to end: CPU is time.
    env["KEYSTONE_SPARK_DRIVER_JAVA_OPTIONS"] = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    # An exactly-once output's open transactions last at most 10 s: a router killed in the
    # tests is down longer than that (Spark's start), so the broker has aborted them by then.
    env["KEYSTONE_KAFKA_TRANSACTION_TIMEOUT_MS"] = "10000"
    env["KEYSTONE_FAULT_SWITCHES"] = "true"  # tests/router/test_exactly_once.py
    # Every test of the suite's stack goes through Kafka's TLS, logins and ACLs (issue 44;
    # tests/security/test_kafka.py): a client configured anywhere but in one place would fail.
    # The cluster stack and the demo run it in plaintext, the default.
    env["KEYSTONE_KAFKA_SECURITY"] = "sasl_ssl"
    # And every Hive write reaches the metastore over TLS (tests/security/test_metastore.py).
    env["KEYSTONE_METASTORE_SECURITY"] = "tls"
    # Two fronting clusters (issue 45; tests/control/test_fronting.py): every stream's topics
    # on both, every router reading both, every app's credential on both. Switched by command
    # only: the tests that stop Kafka prove its 503s, and a failover would move every stream's
    # writes (the cluster stack's drill fails over by itself: tests/cluster/).
    env["KEYSTONE_FRONTING_CLUSTERS"] = "east,west"
    env["KEYSTONE_FRONTING_FAILOVER_AFTER_SECONDS"] = "86400"
    # Alerts reach webhooks the tests serve on loopback (issue 46; tests/alerts/), which the
    # defaults refuse; notified a second after they fire, again two seconds after they change.
    env["KEYSTONE_ALERT_RECEIVER_SCHEMES"] = "http,https"
    env["KEYSTONE_ALERT_RECEIVER_NETWORKS"] = "127.0.0.1/32"
    env["KEYSTONE_ALERT_RECEIVER_PORTS"] = "1024-65535"
    env["KEYSTONE_ALERT_GROUP_WAIT_SECONDS"] = "1"
    env["KEYSTONE_ALERT_GROUP_INTERVAL_SECONDS"] = "2"
    env["KEYSTONE_ALERT_REDEPLOY_SETTLE_SECONDS"] = "20"
    # Alert e-mails go to the SMTP server tests/alerts/ serves on loopback, in plaintext.
    env["KEYSTONE_SMTP_SMARTHOST"] = f"127.0.0.1:{SMTP_PORT + port_offset}"
    env["KEYSTONE_SMTP_FROM"] = "keystone@alerts.test"
    env["KEYSTONE_SMTP_REQUIRE_TLS"] = "false"
    for name, model_field in Settings.model_fields.items():
        if name.endswith("_port"):
            env[f"KEYSTONE_{name.upper()}"] = str(model_field.default + port_offset)
    return env


def private_state_dir() -> Path:
    # Under /tmp and world-traversable: PostgreSQL runs as its own user and must reach it.
    path = Path(tempfile.mkdtemp(prefix="keystone-test-", dir="/tmp"))
    path.chmod(0o755)
    return path


@dataclass
class Stack:
    env: dict[str, str]
    state_dir: Path
    _addresses: dict[str, str] = field(default_factory=dict, repr=False)

    def keystone(
        self, *args: str, timeout: float = 300, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return run([KEYSTONE, *args], env=self.env, timeout=timeout, stdin=stdin)

    def python(self, *args: str, stderr: IO[str] | int = subprocess.PIPE) -> subprocess.Popen[str]:
        """A separate Python process (a Spark application, say) pointed at this stack; a
        long-lived one sends its log to a file (`stderr`), which a pipe nobody reads would block."""
        return subprocess.Popen(
            [sys.executable, *args],
            env=self.env,
            cwd=CHECKOUT,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )

    def status(self) -> dict:
        result = self.keystone("stack", "status", "--json")
        return json.loads(result.stdout)

    def address(self, service: str) -> str:
        """Where a service listens: its ports are the stack's, fixed while it runs, so asked of
        `stack status` once (each time a command, and a health check of every service)."""
        if not self._addresses:
            self._addresses = {n: s["address"] for n, s in self.status()["services"].items()}
        return self._addresses[service]

    def kafka(self) -> dict[str, Any]:
        """A confluent-kafka client's connection to the stack's Kafka (`kafka_clients`)."""
        return kafka_clients.librdkafka(self.settings)

    def proxy_current(self) -> None:
        """Until every proxy process serves the registry as it is now (a key or a stream just
        made): each reloads on its own, and one answer proves only the process that gave it."""
        registry = RegistryReader.connect(self.settings)
        try:
            wanted = registry.version()
        finally:
            registry.close()

        def loaded() -> float:
            text = http.client().get(f"{self.address('ingest_proxy')}/metrics", timeout=10).text
            for family in text_string_to_metric_families(text):
                if family.name == INGEST_REGISTRY_VERSION:
                    return min(s.value for s in family.samples)
            return -1

        eventually("every proxy process to load the registry", lambda: loaded() >= wanted, 30)

    @property
    def settings(self) -> Settings:
        keys = {
            k[len("KEYSTONE_") :].lower(): v
            for k, v in self.env.items()
            if k.startswith("KEYSTONE_")
        }
        return Settings(**keys)


def run(
    argv: list[str], *, env: dict[str, str], timeout: float, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """A command run to its end in this checkout, its output captured."""
    return subprocess.run(
        argv,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=CHECKOUT,
        check=False,
    )


def run_module(
    module: str, *args: str, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """`python -m module args` of this checkout (its virtualenv's Python)."""
    return run([sys.executable, "-m", module, *args], env=env, timeout=timeout)


def checked(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"{result.args} failed:\n{result.stdout}\n{result.stderr}"
    return result
