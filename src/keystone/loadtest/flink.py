"""The peer a team would pick instead of the router: a Flink SQL job per stream (PyPI's
`apache-flink`, Flink's Kafka SQL connector from Maven Central). Only the deployed-router
benchmark runs it; it is never a dependency of the project.

PyFlink pins a py4j that pyspark does not take, so it lives in a virtualenv of its own in the
cache (`<cache>/flink/venv`, made once by `install`), and its job (`loadtest/flink_job.py`) runs
under that interpreter as a file, importing nothing of the project.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from types import TracebackType

from rich.console import Console

from keystone.contracts.settings import Settings
from keystone.loadtest.bench import process_tree
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


class FlinkJob:
    """The Flink SQL job (`flink_job.py`) routing `source` to `sink` from its latest offsets,
    running while the `with` block does, in a process group of its own (its Python launcher
    and the mini-cluster's JVM), its output in `log`."""

    def __init__(
        self,
        settings: Settings,
        python: Path,
        *,
        source: str,
        sink: str,
        state: Path,
        parallelism: int = 1,
        checkpoint_seconds: int = 60,
    ) -> None:
        self.log = state / "flink.log"
        self.command = [
            str(python),
            str(JOB),
            f"--bootstrap={settings.kafka_bootstrap}",
            f"--source={source}",
            f"--sink={sink}",
            f"--jar={bundle_jars(settings, BUNDLE)[0]}",
            f"--state={state}",
            f"--parallelism={parallelism}",
            f"--checkpoint-seconds={checkpoint_seconds}",
            # Its Kafka sink batches as the router's do (KEYSTONE_ROUTER_KAFKA_LINGER_MS).
            f"--linger-ms={settings.router_kafka_linger_ms}",
        ]
        self.state = state
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> FlinkJob:
        self.state.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as out:
            self._process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: stopped whole, metered whole
            )
        return self

    def pids(self) -> list[int]:
        assert self._process is not None, "started by the with block"
        return process_tree(self._process.pid)

    def tail(self) -> str:
        """The end of its log (which goes with its state folder)."""
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""

    def check(self) -> None:
        """Raises if the job has ended (it runs until stopped)."""
        assert self._process is not None, "started by the with block"
        if self._process.poll() is not None:
            raise RuntimeError(f"the Flink job ended ({self._process.returncode}):\n{self.tail()}")

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        process = self._process
        if process is None:
            return
        # The whole group, even when its launcher has ended: the JVM may outlive it.
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(30)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
