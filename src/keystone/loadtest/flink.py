"""The peer a team would pick instead of the router: a Flink SQL job per stream (PyPI's
`apache-flink`, Flink's Kafka SQL connector from Maven Central). Only the deployed-router
benchmark runs it; it is never a dependency of the project.

PyFlink pins a py4j that pyspark does not take, so it lives in a virtualenv of its own in the
cache (`<cache>/flink/venv`, made once by `install`), and its job (`loadtest/flink_job.py`) runs
under that interpreter as a file, importing nothing of the project.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from keystone.contracts import kafka_clients
from keystone.contracts.settings import Settings
from keystone.loadtest import flink_job
from keystone.loadtest.bench import Job
from keystone.router.jvm import bundle_jars
from keystone.stack.jars import fetch_bundle

REQUIREMENT = "apache-flink==2.2.1"  # the Flink the connector's 5.0.0-2.2 is built for
BUNDLE = "flink-kafka"  # stack/maven/flink-kafka.xml
JOB = Path(__file__).with_name("flink_job.py")


def venv(settings: Settings) -> Path:
    return settings.cache_dir / "flink" / "venv"


def install(settings: Settings, console: Console) -> Path:
    """PyFlink's virtualenv and the Kafka connector, each made once (a stamp names what was
    installed); the virtualenv's interpreter."""
    folder = venv(settings)
    python, stamp = folder / "bin" / "python", folder / ".keystone-installed"
    if not (stamp.exists() and stamp.read_text() == REQUIREMENT):
        with console.status(f"installing {REQUIREMENT} into {folder} (once; about a minute)…"):
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True)
            subprocess.run(
                [str(python), "-m", "pip", "install", "-q", REQUIREMENT],
                check=True,
                stdout=subprocess.DEVNULL,
            )
        stamp.write_text(REQUIREMENT)
    with console.status("fetching Flink's Kafka connector (once)…"):
        fetch_bundle(settings, BUNDLE)
    return python


def job(
    settings: Settings,
    python: Path,
    *,
    source: str,
    sink: str,
    state: Path,
    parallelism: int = 1,
    checkpoint_seconds: int = 60,
    starting: str = "latest",
) -> Job:
    """The Flink SQL job (`flink_job.py`) routing `source` to `sink` from its `starting`
    offsets, its Python launcher and the mini-cluster's JVM in one process group."""
    command = [
        str(python),
        str(JOB),
        f"--source={source}",
        f"--sink={sink}",
        f"--jar={bundle_jars(settings, BUNDLE)[0]}",
        f"--state={state}",
        f"--parallelism={parallelism}",
        f"--checkpoint-seconds={checkpoint_seconds}",
        # Its Kafka sink batches as the router's do (KEYSTONE_ROUTER_KAFKA_LINGER_MS).
        f"--linger-ms={settings.router_kafka_linger_ms}",
        f"--starting={starting}",
    ]
    # The connection (secrets too) through the environment, never the command line.
    kafka = {flink_job.CONNECTION: json.dumps(kafka_clients.java(settings))}
    return Job("the Flink job", command, state, env=kafka)
