"""What the benchmarks share: the 1 KB event, the machine's description and how steadily its CPUs
run, the CPU time the processes doing the work spend, the topics a benchmark makes (all of them
deleted when it ends), and the sections of docs/benchmarks.md each benchmark rewrites."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from confluent_kafka import Producer

from keystone.contracts import envelope, kafka_clients
from keystone.contracts.names import dead_letter_topic, fronting_topic
from keystone.contracts.processes import PidFile, stat_fields
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.control.client import ControlClient, ControlError
from keystone.control.launcher import Deployment

# `make bench` runs in the checkout, whose benchmark page it rewrites.
DOCS = Path("docs") / "benchmarks.md"
# The column each benchmark's table gives its CPU figure in, beside events/s.
CPU_COLUMN = "CPU s / M events"
SMOKE_HELP = (
    "a few seconds and a few thousand events through the same code: checks that the benchmark "
    "runs, its figures mean nothing (never with --write-docs)"
)


def parse_arguments(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """A benchmark's arguments, with the two every benchmark takes: --write-docs and --smoke,
    never both (a smoke run's figures mean nothing)."""
    parser.add_argument("--write-docs", action="store_true", help=f"update {DOCS}")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args()
    if args.smoke and args.write_docs:
        parser.error("--smoke: its figures mean nothing, never written to the docs")
    return args


def save_figures(settings: Settings, name: str, figures: object) -> Path:
    """The benchmark's figures as JSON, in `<state>/bench/<name>.json` (what tests read)."""
    out = settings.state_dir / "bench" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2))
    return out


POOL = 10_000  # distinct events `produce` sends (an even number: a filter on `variant` keeps half)


def make_event(seq: int, object_fields: int = 0) -> bytes:
    """A realistic 1 KB event: nested fields, varied types, and a text payload. With
    `object_fields`, its `device` and `user` objects hold that many more fields each (the event
    then outgrows 1 KB: a richer event, whose objects a reader reads a field or two of)."""
    event = {
        "event": "playback_start",
        "seq": seq,
        "country": "US",
        "device": {"type": "tv", "model": "acme-4k", "os": "tvos 17.2"},
        "user": {"id": 1000 + seq % 5000, "profile": "kids" if seq % 7 == 0 else "main"},
        "title": "The Long Night, Part 2",
        "bitrate_kbps": 5800,
        "cdn": "oca-lax-17",
        "latency_ms": 42.5,
        "muted": False,
        "variant": "a" if seq % 2 == 0 else "b",  # a filter on it keeps half
    }
    for i in range(object_fields):
        event["device"][f"attr{i}"] = f"value-{i}"
        event["user"][f"pref{i}"] = {"on": i % 2 == 0, "level": i}
    pad = 1024 - len(json.dumps(event, separators=(",", ":"))) - len(',"notes":""')
    event["notes"] = "x" * max(0, pad)
    return json.dumps(event, separators=(",", ":")).encode()


def produce(
    settings: Settings,
    topic: str,
    count: int,
    rate: float | None = None,
    stream: str | None = None,
) -> None:
    """`count` 1 KB events with the proxy's headers, each stamped as it is sent, to `topic`; at
    `rate` per second when given; `stream`: the one the headers name (default: the topic). The
    events come from a pool made first (`make_event` of `POOL` sequence numbers, over and over):
    making each costs more than sending it, and a producer that cannot keep its rate would
    measure itself."""
    pool = [make_event(seq) for seq in range(min(count, POOL))]
    producer = Producer(kafka_clients.librdkafka(settings) | {"linger.ms": 5, "acks": "all"})
    tick, host = 0.01, platform.node()
    producer.list_topics(topic, timeout=30)  # connected before the first ks_ts is stamped
    started = time.monotonic()
    for seq in range(count):
        if rate is not None and seq % max(1, int(rate * tick)) == 0:
            due = started + seq / rate
            time.sleep(max(0.0, due - time.monotonic()))
        guid = str(uuid.uuid4()).encode()
        common = envelope.common_headers(int(time.time() * 1000), host, "bench", stream or topic)
        while True:
            try:
                producer.produce(
                    topic, pool[seq % POOL], guid, headers=envelope.event_headers(guid, common)
                )
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    assert producer.flush(60) == 0, "events not acknowledged"


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory = (
        int(
            next(
                line.split()[1]
                for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")
            )
        )
        / 1024**2
    )
    return f"{os.cpu_count()} cores ({cpu}), {memory:.0f} GiB, {platform.platform()}"


@dataclass
class Steadiness:
    """The CPU time one fixed unit of work took, sampled on an idle machine (µs). On a VM whose
    host shares its cores the same unit runs at different speeds from one second to the next,
    and a latency measured then feels it."""

    p10_us: float
    p50_us: float
    p90_us: float
    full_speed: float  # the share of samples within 15% of the fastest (its 1st percentile)

    @classmethod
    def of(cls, samples: list[float]) -> Steadiness:
        samples = sorted(samples)
        n, fastest = len(samples), samples[len(samples) // 100]
        return cls(
            samples[n // 10],
            samples[n // 2],
            samples[9 * n // 10],
            sum(s <= 1.15 * fastest for s in samples) / n,
        )

    def __str__(self) -> str:
        return (
            f"a fixed unit of work took {self.p10_us:.0f} / {self.p50_us:.0f} / "
            f"{self.p90_us:.0f} µs of CPU (p10 / p50 / p90), at full speed "
            f"{self.full_speed:.0%} of the time"
        )


def cpu_steadiness(seconds: float = 10.0) -> Steadiness:
    """Samples every 20 ms for `seconds`. CPU time, not wall time: a slower CPU shows, time
    spent waiting for one does not."""
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.thread_time_ns()
        sum(range(20_000))  # about 250 µs at full speed on the machine of docs/benchmarks.md
        samples.append((time.thread_time_ns() - start) / 1000)
        time.sleep(0.02)
    return Steadiness.of(samples)


def write_section(marker: str, heading: str, section: str) -> None:
    """Replaces the text between `<!-- marker:begin -->` and `<!-- marker:end -->`, or appends
    it under `## heading`."""
    begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
    text = DOCS.read_text() if DOCS.exists() else "# Benchmarks\n"
    block = f"{begin}\n{section}{end}"
    if begin in text:
        text = re.sub(f"{re.escape(begin)}.*?{re.escape(end)}", lambda _: block, text, flags=re.S)
    else:
        text = f"{text.rstrip()}\n\n## {heading}\n\n{block}\n"
    DOCS.write_text(text)


# CPU time, from /proc: utime and stime (fields 14 and 15 of /proc/<pid>/stat) cover every
# thread of the process, ended ones included.
_TICK = os.sysconf("SC_CLK_TCK")


def process_tree(*roots: int) -> list[int]:
    """The live processes among `roots` and every live process descended from them."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = stat_fields(entry.name)
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    pending = [pid for pid in roots if stat_fields(pid) is not None]
    while pending:
        pid = pending.pop()
        if pid not in found:
            found.append(pid)
            pending += children.get(pid, [])
    return found


def cpu_times(pids: Iterable[int]) -> dict[tuple[int, int], float]:
    """User + system CPU seconds each process has used so far, by (pid, start time in clock
    ticks since boot): a pid used again by a later process is another key. Children's time
    (cutime, cstime) is left out: a descendant that counts is named itself."""
    times = {}
    for pid in set(pids):
        fields = stat_fields(pid)
        if fields is not None:
            times[(pid, int(fields[19]))] = (int(fields[11]) + int(fields[12])) / _TICK
    return times


class Job:
    """A job a benchmark runs beside the router (Flink's, Spark's floor), while the `with` block
    does: `command` in a process group of its own (stopped whole, metered whole), its output in
    `<state>/job.log`, `env` added to this process' environment (where secrets go, never in
    `command`)."""

    def __init__(
        self, label: str, command: list[str], state: Path, env: dict[str, str] | None = None
    ) -> None:
        self.label, self.command, self.state, self.env = label, command, state, env or {}
        self.log = state / "job.log"
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Job:
        self.state.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as out:
            self._process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=os.environ | self.env,
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
            raise RuntimeError(f"{self.label} ended ({self._process.returncode}):\n{self.tail()}")

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        process = self._process
        if process is None:
            return
        # The whole group, even when its launcher has ended: a JVM may outlive it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(30)
        with contextlib.suppress(ProcessLookupError):  # what is left of it, the launcher gone
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


class CpuMeter:
    """The CPU seconds the processes named by `pids()` use while the meter runs (a `with`
    block). `pids()` is asked again at each sample, every `every` seconds (None: only at the
    start and at the end), so that a process that starts meanwhile (a router the fleet starts
    again) counts from its start; one that ends counts up to its last sample."""

    def __init__(self, pids: Callable[[], Iterable[int]], every: float | None = 1.0) -> None:
        self.pids = pids
        self.every = every
        self._first: dict[tuple[int, int], float] = {}
        self._last: dict[tuple[int, int], float] = {}
        self._started_ticks = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self, first: bool = False) -> None:
        for key, seconds in cpu_times(self.pids()).items():
            if key not in self._first:
                # Started after the meter (its start is counted in whole ticks): all its time
                # falls in the interval.
                started_after = not first and key[1] >= self._started_ticks
                self._first[key] = 0.0 if started_after else seconds
            self._last[key] = seconds

    def _run(self) -> None:
        assert self.every is not None
        while not self._stop.wait(self.every):
            self._sample()

    def __enter__(self) -> CpuMeter:
        self._started_ticks = int(time.clock_gettime(time.CLOCK_BOOTTIME) * _TICK)
        self._sample(first=True)
        if self.every is not None:
            self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()

    @property
    def seconds(self) -> float:
        return sum(self._last[key] - first for key, first in self._first.items())


def spark_processes(spark: object) -> Callable[[], list[int]]:
    """A Spark application's processes in this one: this Python process (the driver's Python
    side) and the JVM pyspark started (driver and executor in local mode), with the JVM's
    descendants (Python workers, if any). This process' other children are not counted."""
    jvm = spark.sparkContext._gateway.proc.pid  # type: ignore[attr-defined]
    me = os.getpid()
    return lambda: [me, *process_tree(jvm)]


def proxy_processes(settings: Settings) -> Callable[[], list[int]] | None:
    """The embedded proxy's processes: its launcher (from its pid file) and the server
    processes it started; None when the proxy is not the embedded stack's."""
    pid = PidFile(settings.run_dir / "ingest_proxy.pid").running_pid()
    return None if pid is None else (lambda: process_tree(pid))


def resident_mb(pids: Iterable[int]) -> float:
    """The resident memory of the processes, MB: every page they map, shared ones too."""
    return _memory_kb(pids, "status", "VmRSS") / 1024


def proportional_mb(pids: Iterable[int]) -> float:
    """The processes' proportional share of memory, MB: each page they map divided among the
    processes that map it (a page of the drivers' class archive, say, shared by every router
    of the machine), what each costs of a machine that runs many."""
    return _memory_kb(pids, "smaps_rollup", "Pss") / 1024


def _memory_kb(pids: Iterable[int], file: str, field: str) -> int:
    total = 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/{file}").read_text()
        except OSError:
            continue
        found = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
        total += int(found.group(1)) if found else 0
    return total


def per_million(cpu_seconds: float | None, events: int | float) -> float | None:
    """CPU seconds per million events; None without a measure or without events."""
    if cpu_seconds is None or not events:
        return None
    return cpu_seconds / events * 1_000_000


def delete_streams(
    settings: Settings, control: ControlClient, streams: Iterable[str]
) -> list[StreamSpec]:
    """Deletes the streams that exist, in order, each once its router has stopped (two minutes
    at most); their specs, for the caller to delete their topics and indices."""
    deleted = []
    for name in streams:
        try:
            made = control.stream(name).spec
            control.delete_stream(name)
        except ControlError as e:
            if e.status == 404:
                continue
            raise
        deadline = time.monotonic() + 120
        while (d := Deployment.load(settings, name)) and d.alive() and time.monotonic() < deadline:
            time.sleep(1)
        deleted.append(made)
    return deleted


def stream_topics(spec: StreamSpec) -> list[str]:
    """Every topic a stream's provisioning and router make: its fronting and dead-letter topics
    and its Kafka outputs' topics."""
    return [fronting_topic(spec.name), dead_letter_topic(spec.name), *spec.kafka_topics().values()]
