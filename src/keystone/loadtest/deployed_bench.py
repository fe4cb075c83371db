"""The router as control deploys it, beside the Flink SQL job a team would run instead and
beside Spark's floor, in one run on the running stack (issue 43).

    python -m keystone.loadtest.deployed_bench [--rates 1000,5000,20000|none] [--settle 120]
        [--warm-up 20] [--seconds 130] [--rounds 1] [--idle 300] [--catch-up N]
        [--targets router,floor,flink] [--smoke] [--write-docs]

The router: a stream made through control (`keystone stream create` does the same), one
realtime Kafka output with a filter keeping half and a projection of five fields (the router
benchmark's), 4 partitions, archive off, its sizing pinned to the highest rate so the fleet
does not resize it during the run. Flink: the same routing as a Flink SQL job
(`loadtest/flink_job.py`: PyFlink 2.2 in a local mini-cluster, parallelism 1, checkpoints every
60 s as the router's output's Real-time Mode checkpoint interval, at least once), from a topic
of its own. Spark's floor: one Spark application as the router's with one Real-time Mode query
that reads no JSON (`loadtest/spark_floor.py`): what Spark costs before any routing, so that what
is the router's own cost and what is the engine's can be told apart. All run for the whole
benchmark; each is fed in its turn.

First each target settles: `--settle` seconds of the lowest rate, not measured (a JVM compiles its
hot code for minutes after it starts; what a router costs is what it costs once running). Then, for
each round and each rate (the targets take turns going first): 1 KB events with the proxy's headers,
written straight to the target's input topic at the rate for `--warm-up` seconds, then for
`--seconds` (by default over two checkpoint intervals, so that two checkpoints fall in it) while its
whole process tree is metered (the router's and the floor's Python driver and Spark JVM; Flink's
PyFlink launcher and mini-cluster JVM). Then every record the target wrote of the measured events
is read back: latency is the record's Kafka append time (the output topics keep
`LogAppendTime`: the broker's clock, whoever wrote the record) minus the event's ingest time
(`ks_ts`), p50, p99, p99.9; a measured event the output lacks is counted as missing. Last, all
idle together for `--idle` seconds: CPU as a share of a core, and memory at the end, resident
and proportional (shared pages divided among the processes that map them).

With `--catch-up N`, then each target in turn drains a topic preloaded with N events: the router
an output added to a new stream with `start: earliest` in 1-second micro-batches (its size pinned
at the smallest), the floor in the same micro-batches, Flink from the earliest offsets; from the
output's first record to its last, events read per second and CPU per event.

Every stream, topic and folder the benchmark makes is deleted when it ends, whether it ended
well or not. `--smoke` runs the router and the floor at 500 events/s for a few seconds, then has
them catch up on 2,000 events: it checks that the benchmark runs, its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import signal
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from rich.table import Table

from keystone import terminal
from keystone.contracts import kafka_clients
from keystone.contracts.errors import KeystoneError, Unavailable
from keystone.contracts.names import fronting_topic, output_topic
from keystone.contracts.settings import Settings
from keystone.contracts.spec import DEFAULT_TRIGGERS, Delivery, load_spec
from keystone.control.client import ControlClient
from keystone.control.launcher import Deployment
from keystone.loadtest import flink
from keystone.loadtest.bench import (
    CPU_COLUMN,
    CpuMeter,
    Job,
    delete_streams,
    machine,
    parse_arguments,
    per_million,
    process_tree,
    produce,
    proportional_mb,
    resident_mb,
    save_figures,
    stream_topics,
    write_section,
)
from keystone.loadtest.router_bench import FILTER, PROJECTION
from keystone.loadtest.run import await_routers
from keystone.router.plan import records_per_batch
from keystone.router.topics import create_topics, delete_topics, watermarks
from keystone.terminal import console

COMMAND = "python -m keystone.loadtest.deployed_bench --write-docs"
OWNER, PARTITIONS, OUTPUT = "bench-deployed", 4, "out"
CHECKPOINT = Delivery(mode="realtime").seconds  # the router output's default, and Flink's
READ_BACK_SECONDS = CHECKPOINT + 60.0  # for the last measured records to reach the output
NAMES = {"router": "router", "floor": "Spark floor", "flink": "Flink"}  # as the page says them
TARGETS = tuple(NAMES)
# Catching up: each target drains a topic preloaded with --catch-up events, the router's output
# added from the earliest in micro-batches of a second, its size pinned at the smallest (so
# batches of the router's least limit, which the floor takes too).
SMALLEST = 1_000
CATCH_UP_TRIGGER = "1 second"
CATCH_UP_SECONDS = 900.0


def spec(name: str, rate: int) -> dict:
    """The stream: one realtime Kafka output of the router benchmark's routing, its size
    pinned to `rate`."""
    return {
        "name": name,
        "owner": OWNER,
        "partitions": PARTITIONS,
        "archive": {"enabled": False},
        "sizing": {"min_events_per_second": rate, "max_events_per_second": rate},
        "outputs": [
            {
                "name": OUTPUT,
                "filter": FILTER,
                "projection": PROJECTION,
                "sink": {"type": "kafka"},
                "delivery": {"mode": "realtime", "trigger": DEFAULT_TRIGGERS["realtime"]},
            }
        ],
    }


@dataclass(frozen=True)
class Target:
    """One of the two routers: the topic it reads and the one it writes, and its processes."""

    name: str
    source: str
    sink: str
    pids: Callable[[], list[int]]
    check: Callable[[], None]  # raises if it no longer runs


@dataclass
class Phase:
    """One target at one rate, one round."""

    target: str
    rate: int
    round: int
    seconds: float
    events: int  # sent while measured
    cores: float  # CPU seconds over the measured seconds
    cpu_s_per_m_events: float | None
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    delivered: int  # measured events read back
    missing: int  # measured events the filter keeps that the output lacks
    copies: int  # records of measured events written more than once


@dataclass
class Idle:
    """One target idle: CPU over the seconds as a share of a core; memory at the end, resident
    and proportional (`loadtest.bench.proportional_mb`)."""

    target: str
    seconds: float
    cores: float
    rss_mb: float
    pss_mb: float


def log_append_time(settings: Settings, topics: list[str]) -> None:
    """The topics' records stamped by the broker as it appends them."""
    admin = AdminClient(kafka_clients.librdkafka(settings))
    entry = ConfigEntry(
        "message.timestamp.type",
        "LogAppendTime",
        incremental_operation=AlterConfigOpType.SET,
    )
    resources = [ConfigResource(ResourceType.TOPIC, t, incremental_configs=[entry]) for t in topics]
    for future in admin.incremental_alter_configs(resources).values():
        future.result(timeout=30)


def send(settings: Settings, topic: str, count: int, rate: int | None) -> None:
    """`count` events at `rate` (None: as fast as Kafka takes them) to `topic`, from a process
    of its own: here, the producer would share this one's GIL with the read-back and the
    meter."""
    producer = multiprocessing.get_context("spawn").Process(
        target=produce, args=(settings, topic, count, rate)
    )
    producer.start()
    try:
        producer.join()
    finally:  # stopped meanwhile (SIGTERM, an interrupt): the producer with it
        if producer.is_alive():
            producer.terminate()
            producer.join()
    if producer.exitcode != 0:
        raise RuntimeError(f"the producer to {topic} failed ({producer.exitcode})")


def read_back(
    settings: Settings,
    topic: str,
    start: dict[int, int],
    since_ms: int,
    expected: int,
    timeout: float = READ_BACK_SECONDS,
) -> tuple[dict[bytes, int], int]:
    """The records from `start` on whose event was ingested at or after `since_ms`, read until
    `expected` events have one or `timeout` seconds pass: each event's latency (ms) by its
    guid (the record's key), its first record's; and how many records were copies (every
    target writes at least once)."""
    consumer = Consumer(
        kafka_clients.librdkafka(settings)
        | {
            "group.id": f"deployed-bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, o) for p, o in start.items()])
    latencies: dict[bytes, int] = {}
    copies = 0
    deadline = time.monotonic() + timeout
    try:
        while len(latencies) < expected and time.monotonic() < deadline:
            for message in consumer.consume(10_000, timeout=1.0):
                if message.error() is not None:
                    continue
                ingested = json.loads(message.value())["timestamp"]
                if ingested < since_ms:
                    continue
                guid = message.key()
                if guid in latencies:
                    copies += 1
                else:
                    latencies[guid] = message.timestamp()[1] - ingested
    finally:
        consumer.close()
    return latencies, copies


def percentile(ordered: list[int], share: float) -> float:
    return float(ordered[min(len(ordered) - 1, int(len(ordered) * share))]) if ordered else 0.0


def phase(
    settings: Settings, target: Target, rate: int, round_: int, warm_up: int, seconds: int
) -> Phase:
    with console.status(f"{target.name}: warming up at {rate:,} events/s for {warm_up} s…"):
        send(settings, target.source, rate * warm_up, rate)
    target.check()
    start = {p: end for p, (_, end) in watermarks(settings, target.sink).items()}
    since_ms, events = int(time.time() * 1000), rate * seconds
    status = console.status(f"{target.name}: {rate:,} events/s for {seconds} s…")
    with status, CpuMeter(target.pids) as meter:
        began = time.monotonic()
        send(settings, target.source, events, rate)
        took = time.monotonic() - began
    # The pool alternates `variant` from sequence number 0, which the filter keeps.
    expected = (events + 1) // 2
    with console.status(f"{target.name}: reading back {expected:,} records…"):
        by_guid, copies = read_back(settings, target.sink, start, since_ms, expected)
    latencies = sorted(by_guid.values())
    target.check()
    return Phase(
        target.name,
        rate,
        round_,
        round(took, 1),
        events,
        meter.seconds / took,
        per_million(meter.seconds, events),
        percentile(latencies, 0.5),
        percentile(latencies, 0.99),
        percentile(latencies, 0.999),
        float(latencies[-1]) if latencies else 0.0,
        len(latencies),
        max(0, expected - len(latencies)),
        copies,
    )


def idle(targets: list[Target], seconds: int) -> list[Idle]:
    with console.status(f"idle for {seconds} s…"), ExitStack() as running:
        meters = [running.enter_context(CpuMeter(t.pids)) for t in targets]
        time.sleep(seconds)
    return [
        Idle(t.name, seconds, m.seconds / seconds, resident_mb(pids), proportional_mb(pids))
        for t, m, pids in zip(targets, meters, (t.pids() for t in targets), strict=True)
    ]


@contextmanager
def router_target(
    settings: Settings,
    rate: int,
    topics: list[str],
    shadow: dict | None = None,
    target: str = "router",
) -> Iterator[Target]:
    """The stream, made through control, until the block ends (then deleted with its topics,
    which are added to `topics`). `shadow`: a version of its output to run as a shadow beside
    it (`contracts.shadows`), dropped, and its targets removed, before the stream goes."""
    name = f"bench_deployed_{uuid.uuid4().hex[:6]}"
    made = spec(name, rate)
    sink = output_topic(name, OUTPUT)
    topics += stream_topics(load_spec(made))
    with ControlClient.from_settings(settings) as control:
        try:
            create_topics(settings, {sink: PARTITIONS})
            log_append_time(settings, [sink])
            control.put_stream(made)
            await_routers(control, [name], console)
            if shadow is not None:
                control.shadow(name, {"output": {**made["outputs"][0], **shadow}})

            def pids() -> list[int]:
                deployed = Deployment.load(settings, name)
                return process_tree(deployed.pid) if deployed and deployed.alive() else []

            def check() -> None:
                if not pids():
                    raise RuntimeError(f"the router of {name} is not running")

            yield Target(target, fronting_topic(name), sink, pids, check)
        finally:
            if shadow is not None:
                end_shadow(control, name)
            delete_streams(settings, control, [name])
            delete_topics(settings, stream_topics(load_spec(made)))


def end_shadow(control: ControlClient, stream: str, timeout: float = 300) -> None:
    """Drops the stream's shadow, if it runs, and waits until it has ended (its targets gone):
    till then the stream may not be deleted."""
    try:
        shown = control.drop_shadow(stream, OUTPUT)
    except KeystoneError as e:
        console.print(f"[yellow]the shadow of {stream}.{OUTPUT} not dropped: {e.message}[/]")
        return
    deadline = time.monotonic() + timeout
    with console.status(f"shadow {shown.id}: ending…"):
        while control.shadow_view(stream, OUTPUT).state != "ended":
            if time.monotonic() > deadline:
                raise Unavailable(f"shadow {shown.id} did not end in {timeout:.0f} s")
            time.sleep(1)


@contextmanager
def flink_target(settings: Settings, topics: list[str]) -> Iterator[Target]:
    """The Flink SQL job on topics of its own, until the block ends (then stopped, its topics,
    which are added to `topics`, and its state deleted)."""
    python = flink.install(settings, console)
    name = f"bench_flink_{uuid.uuid4().hex[:6]}"
    source, sink = f"{name}.in", f"{name}.out"
    state = settings.state_dir / "bench" / name
    job = flink.job(
        settings, python, source=source, sink=sink, state=state, checkpoint_seconds=CHECKPOINT
    )
    with peer_job(settings, "flink", job, source, sink, topics) as target:
        yield target


@contextmanager
def floor_target(settings: Settings, topics: list[str]) -> Iterator[Target]:
    """Spark's floor (`loadtest/spark_floor.py`) on topics of its own, sized for the stream's
    realtime query (a task slot per partition), until the block ends."""
    name = f"bench_floor_{uuid.uuid4().hex[:6]}"
    source, sink = fronting_topic(name), output_topic(name, OUTPUT)
    state = settings.state_dir / "bench" / name
    command = floor_command(name, sink, state)
    job = Job("Spark's floor", command, state)
    with peer_job(settings, "floor", job, source, sink, topics) as target:
        yield target


def floor_command(name: str, sink: str, state: Path, *, batches: bool = False) -> list[str]:
    """Spark's floor for the stream `name`'s fronting topic: under Real-time Mode from its latest
    offsets; with `batches`, in the router's catch-up micro-batches from its earliest."""
    command = [
        sys.executable,
        "-m",
        "keystone.loadtest.spark_floor",
        f"--stream={name}",
        f"--sink={sink}",
        f"--slots={PARTITIONS}",
        f"--checkpoint={state / 'checkpoint'}",
        f"--checkpoint-seconds={CHECKPOINT}",
    ]
    if batches:
        limit = records_per_batch(SMALLEST)
        command += [
            "--starting=earliest",
            f"--batches={CATCH_UP_TRIGGER}",
            f"--batch-limit={limit}",
        ]
    return command


@contextmanager
def peer_job(
    settings: Settings, name: str, job: Job, source: str, sink: str, topics: list[str]
) -> Iterator[Target]:
    """`job` routing `source` to `sink` (topics made here, added to `topics`), from when it
    routes until the block ends; then stopped, its topics and its state deleted."""
    topics += [source, sink]
    try:
        create_topics(settings, {source: PARTITIONS, sink: PARTITIONS})
        log_append_time(settings, [sink])
        with job:
            await_routing(settings, job, source, sink)
            yield Target(name, source, sink, job.pids, job.check)
    finally:
        delete_topics(settings, [source, sink])
        shutil.rmtree(job.state, ignore_errors=True)


def await_routing(settings: Settings, job: Job, source: str, sink: str) -> None:
    """Until the job routes: one event at a time until one of them comes out (it reads from
    the latest offsets once it runs, so earlier ones are not read)."""
    deadline = time.monotonic() + 180
    with console.status(f"waiting for {job.label} to route…"):
        while time.monotonic() < deadline:
            job.check()
            since = int(time.time() * 1000)
            try:
                start = {p: end for p, (_, end) in watermarks(settings, sink).items()}
            except Unavailable:  # a topic just made has no leader for a moment
                time.sleep(1)
                continue
            produce(settings, source, 2)  # the first keeps `variant` a
            if read_back(settings, sink, start, since, 1, timeout=5)[0]:
                return
        raise RuntimeError(f"{job.label} did not route within 180 s:\n{job.tail()}")


@dataclass
class CatchUp:
    """One target draining a topic preloaded with `events`: from its output's first record
    to the last it was to write."""

    target: str
    events: int  # preloaded
    delivered: int  # records its output held at the end
    seconds: float
    events_per_second: float  # preloaded events read per second (every one is read)
    cpu_s_per_m_events: float | None


def drain(
    settings: Settings, target: str, pids: Callable[[], list[int]], sink: str, events: int
) -> CatchUp:
    """Waits for the target's first output record, then meters its processes until its output
    holds the records of the kept half of `events` (or `CATCH_UP_SECONDS` pass)."""
    expected = (events + 1) // 2  # the pool alternates `variant` from 0, which the filter keeps

    def held() -> int:
        try:
            return sum(end for _, end in watermarks(settings, sink).values())
        except Unavailable:
            return 0

    deadline = time.monotonic() + CATCH_UP_SECONDS
    with console.status(f"{target}: waiting for its first record…"):
        while held() == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
    began = time.monotonic()
    status = console.status(f"{target}: catching up on {events:,} events…")
    with status, CpuMeter(pids) as meter:
        while (count := held()) < expected and time.monotonic() < deadline:
            time.sleep(0.25)
        took = time.monotonic() - began
    if count < expected:
        raise RuntimeError(f"{target} wrote {count:,} of {expected:,} records in time")
    return CatchUp(
        target, events, count, round(took, 1), events / took, per_million(meter.seconds, events)
    )


def catch_up_router(settings: Settings, events: int, topics: list[str]) -> CatchUp:
    """A stream with `events` on its fronting topic, then an output added from the earliest
    (`start: earliest`, 1-second micro-batches, the routing of the steady phases): the router
    control starts for it drains them."""
    name = f"bench_catchup_{uuid.uuid4().hex[:6]}"
    made = {**spec(name, SMALLEST), "outputs": []}
    sink = output_topic(name, OUTPUT)
    topics += [*stream_topics(load_spec(made)), sink]
    output = {
        **spec(name, SMALLEST)["outputs"][0],
        "start": "earliest",
        "delivery": {"mode": "microbatch", "trigger": CATCH_UP_TRIGGER},
    }
    with ControlClient.from_settings(settings) as control:
        try:
            control.put_stream(made)
            preload(settings, fronting_topic(name), events)
            create_topics(settings, {sink: PARTITIONS})
            control.put_output(name, output)

            def pids() -> list[int]:
                deployed = Deployment.load(settings, name)
                return process_tree(deployed.pid) if deployed and deployed.alive() else []

            return drain(settings, "router", pids, sink, events)
        finally:
            delete_streams(settings, control, [name])
            delete_topics(settings, [*stream_topics(load_spec(made)), sink])


def catch_up_job(
    settings: Settings, target: str, events: int, topics: list[str], make: Callable[..., Job]
) -> CatchUp:
    """A peer job started on a topic preloaded with `events`, from its earliest offsets;
    `make(name, source, sink, state)` is the job."""
    name = f"bench_catchup_{uuid.uuid4().hex[:6]}"
    source, sink = fronting_topic(name), output_topic(name, OUTPUT)
    topics += [source, sink]
    state = settings.state_dir / "bench" / name
    try:
        create_topics(settings, {source: PARTITIONS, sink: PARTITIONS})
        preload(settings, source, events)
        with make(name, source, sink, state) as job:
            return drain(settings, target, job.pids, sink, events)
    finally:
        delete_topics(settings, [source, sink])
        shutil.rmtree(state, ignore_errors=True)


def preload(settings: Settings, topic: str, events: int) -> None:
    with console.status(f"preloading {events:,} events…"):
        send(settings, topic, events, None)


def catch_ups(
    settings: Settings, chosen: list[str], events: int, topics: list[str]
) -> list[CatchUp]:
    """Each chosen target catching up on `events` in turn."""

    def floor(name: str, source: str, sink: str, state: Path) -> Job:
        return Job("Spark's floor", floor_command(name, sink, state, batches=True), state)

    def flink_peer(name: str, source: str, sink: str, state: Path) -> Job:
        python = flink.install(settings, console)
        return flink.job(
            settings,
            python,
            source=source,
            sink=sink,
            state=state,
            checkpoint_seconds=CHECKPOINT,
            starting="earliest",
        )

    found = []
    for target in chosen:
        if target == "router":
            found.append(catch_up_router(settings, events, topics))
        else:
            make = floor if target == "floor" else flink_peer
            found.append(catch_up_job(settings, target, events, topics, make))
        console.print(catch_up_table(found[-1:]))
    return found


def catch_up_table(rows: list[CatchUp]) -> Table:
    table = terminal.table("target", "events", "seconds", "events/s", CPU_COLUMN)
    for r in rows:
        table.add_row(
            r.target,
            f"{r.events:,}",
            f"{r.seconds:.1f}",
            f"{r.events_per_second:,.0f}",
            f"{r.cpu_s_per_m_events or 0:.0f}",
        )
    return table


CATCH_UP_HEADS = [
    "target",
    "events",
    "seconds",
    "events/s",
    CPU_COLUMN,
    "rate over Flink's",
    "CPU over Flink's",
]


def table_head(heads: list[str]) -> str:
    """A markdown table's head: the first column left, the others (figures) right."""
    rule = ["---", *["---:"] * (len(heads) - 1)]
    return f"| {' | '.join(heads)} |\n| {' | '.join(rule)} |\n"


def ratio_cell(ratio: dict[str, float], key: str, form: str) -> str:
    return format(ratio[key], form) if key in ratio else ""


def median_of(phases: list[Phase], target: str, rate: int, field: str) -> float | None:
    """The median over the rounds of one target's `field` at `rate`; None if it did not run."""
    values = [getattr(p, field) for p in phases if p.target == target and p.rate == rate]
    return statistics.median(values) if values else None


def ratios(phases: list[Phase]) -> dict[int, dict[str, float]]:
    """Per rate, over Flink: the router's CPU per event and p99, and Spark's floor's CPU per
    event (the medians of the rounds)."""
    # CPU per event, not cores: the targets may take a little more or less than the nominal
    # seconds to send the same events.
    found: dict[int, dict[str, float]] = {}
    for rate in sorted({p.rate for p in phases}):
        flink_cpu = median_of(phases, "flink", rate, "cpu_s_per_m_events")
        flink_p99 = median_of(phases, "flink", rate, "p99_ms")
        if not flink_cpu or not flink_p99:
            continue
        found[rate] = {}
        for target, key in (("router", "cpu"), ("floor", "floor_cpu")):
            cpu = median_of(phases, target, rate, "cpu_s_per_m_events")
            if cpu is not None:
                found[rate][key] = cpu / flink_cpu
        router_p99 = median_of(phases, "router", rate, "p99_ms")
        if router_p99 is not None:
            found[rate]["p99"] = router_p99 / flink_p99
    return found


def phases_table(phases: list[Phase]) -> Table:
    table = terminal.table(
        "target", "rate", "round", "cores", CPU_COLUMN, "p50 ms", "p99 ms", "p99.9 ms"
    )
    for p in phases:
        table.add_row(
            p.target,
            f"{p.rate:,}",
            str(p.round),
            f"{p.cores:.3f}",
            f"{p.cpu_s_per_m_events or 0:.0f}",
            f"{p.p50_ms:.0f}",
            f"{p.p99_ms:.0f}",
            f"{p.p999_ms:.0f}",
        )
    return table


def markdown(phases: list[Phase], idles: list[Idle], args: argparse.Namespace) -> str:
    """The section of docs/benchmarks.md: per rate, each target's medians, and the ratios."""
    rates = sorted({p.rate for p in phases})
    found = ratios(phases)

    def cell(target: str, rate: int, field: str, form: str) -> str:
        value = median_of(phases, target, rate, field)
        return "" if value is None else format(value, form)

    def latency(target: str, rate: int) -> str:
        return " / ".join(cell(target, rate, f, ".0f") for f in ("p50_ms", "p99_ms", "p999_ms"))

    cpu_rows, latency_rows = [], []
    for rate in rates:
        ratio = found.get(rate, {})
        cpu_rows.append(
            f"| {rate:,} events/s | "
            + " | ".join(cell(t, rate, "cores", ".3f") for t in TARGETS)
            + " | "
            + " | ".join(cell(t, rate, "cpu_s_per_m_events", ".0f") for t in TARGETS)
            + f" | {ratio_cell(ratio, 'cpu', '.2f')} | {ratio_cell(ratio, 'floor_cpu', '.2f')} |"
        )
        latency_rows.append(
            f"| {rate:,} events/s | "
            + " | ".join(latency(t, rate) for t in TARGETS)
            + f" | {ratio_cell(ratio, 'p99', '.1f')} |"
        )
    missing, copies = sum(p.missing for p in phases), sum(p.copies for p in phases)
    cpu_goal = ", ".join(f"{r['cpu']:.2f} at {rate:,}/s" for rate, r in found.items())
    floor = ", ".join(f"{r['floor_cpu']:.2f} at {rate:,}/s" for rate, r in found.items())
    p99_5k = median_of(phases, "router", 5_000, "p99_ms")
    latency_goal = "5,000 not run" if p99_5k is None else f"{p99_5k:.0f} ms at 5,000 events/s"
    idle_rows = "\n".join(
        f"| {NAMES[i.target]} | {100 * i.cores:.1f}% | {i.rss_mb:,.0f} MB | {i.pss_mb:,.0f} MB |"
        for i in idles
    )
    spread = "; ".join(
        f"{NAMES[p.target]} at {p.rate:,}/s round {p.round}: {p.cores:.3f} cores, "
        f"p99 {p.p99_ms:.0f} ms"
        for p in phases
    )
    cpu_heads = [f"{NAMES[t]} cores" for t in TARGETS] + [
        f"{NAMES[t]} {CPU_COLUMN}" for t in TARGETS
    ]
    latency_heads = [f"{NAMES[t]} p50 / p99 / p99.9 ms" for t in TARGETS]
    return (
        f"Command: `{COMMAND}` (rates {args.rates}, each target settled {args.settle} s, "
        f"{args.warm_up} s of warm-up, "
        f"{args.seconds} s measured, {args.rounds} round(s), idle {args.idle} s), "
        f"{time.strftime('%Y-%m-%d')}; Kafka, the targets and the producer on the same "
        f"machine.\nMachine: {machine()}.\n\n"
        "The router as control deploys it (one realtime Kafka output: a filter keeping half, "
        "five fields projected; its whole process tree metered) beside a Flink SQL job doing "
        f"the same routing ({flink.REQUIREMENT}, parallelism 1, checkpoints every "
        f"{CHECKPOINT:.0f} s, at least once), and beside Spark's floor: one Spark application "
        "as the router's with one Real-time Mode query that reads no JSON and writes each kept "
        "event's guid and ingest time (`loadtest/spark_floor.py`), what Spark costs before any "
        "routing. Cores: CPU seconds over the measured seconds. Latency: the output record's "
        "broker append time minus the event's `ks_ts`. Medians of the rounds.\n\n"
        + table_head(["load", *cpu_heads, "CPU router / Flink", "CPU floor / Flink"])
        + "\n".join(cpu_rows)
        + "\n\n"
        + table_head(["load", *latency_heads, "p99 router / Flink"])
        + "\n".join(latency_rows)
        + "\n\nWhere the goals stand: the router's CPU per event over Flink's "
        f"{cpu_goal} (goal: at most 1), Spark's floor's {floor}; the router's p99 "
        f"{latency_goal} (goal: at most 100 ms). Measured events missing from an output: "
        f"{missing}; records written twice: {copies}.\n\n"
        f"Idle, together for {args.idle} s after the loads:\n\n"
        "| target | CPU | resident memory | proportional memory |\n| --- | ---: | ---: | ---: |\n"
        f"{idle_rows}\n\nEach phase: {spread}.\n"
    )


def catch_up_markdown(rows: list[CatchUp], args: argparse.Namespace) -> str:
    """The catch-up section of docs/benchmarks.md: each target's rate and CPU per event, and
    the router's and the floor's over Flink's."""
    flink_row = next((r for r in rows if r.target == "flink"), None)

    def over(value: float | None, base: float | None) -> str:
        return f"{value / base:.2f}" if value and base else ""

    lines = []
    for r in rows:
        rate = over(r.events_per_second, flink_row.events_per_second if flink_row else None)
        cpu = over(r.cpu_s_per_m_events, flink_row.cpu_s_per_m_events if flink_row else None)
        lines.append(
            f"| {NAMES[r.target]} | {r.events:,} | {r.seconds:.1f} | {r.events_per_second:,.0f} "
            f"| {r.cpu_s_per_m_events or 0:.0f} | {rate} | {cpu} |"
        )
    command = f"python -m keystone.loadtest.deployed_bench --rates none --catch-up {args.catch_up}"
    return (
        f"Command: `{command} --write-docs`, {time.strftime('%Y-%m-%d')}; Kafka, the targets "
        f"and the producer on the same machine.\nMachine: {machine()}.\n\n"
        f"Each target in turn drains a topic preloaded with {args.catch_up:,} events (the "
        "steady phases' 1 KB events, the same routing): the router an output added to a "
        f"stream with `start: earliest`, in micro-batches of {CATCH_UP_TRIGGER} (its size "
        f"pinned at {SMALLEST:,} events/s: batches of at most "
        f"{records_per_batch(SMALLEST):,} records), Spark's floor in "
        "the same micro-batches, Flink from the earliest offsets. Measured from the output's "
        "first record to its last (start-up left out): events read per second, and CPU per "
        "event of the whole process tree.\n\n"
        + table_head(CATCH_UP_HEADS)
        + "\n".join(lines)
        + "\n\nGoals (issue 43): the router's rate at least Flink's, its CPU per event at most "
        "Flink's.\n"
    )


def steady(
    settings: Settings,
    chosen: list[str],
    rates: list[int],
    args: argparse.Namespace,
    topics: list[str],
) -> tuple[list[Phase], list[Idle]]:
    """The steady phases, each target settled first and fed in its turn, then all idle."""
    phases: list[Phase] = []
    makers = {
        "router": lambda: router_target(settings, max(rates), topics),
        "floor": lambda: floor_target(settings, topics),
        "flink": lambda: flink_target(settings, topics),
    }
    with ExitStack() as running:
        targets = [running.enter_context(makers[t]()) for t in chosen]
        for target in targets:
            settling = f"{target.name}: settling, {min(rates):,}/s for {args.settle} s…"
            with console.status(settling):
                send(settings, target.source, min(rates) * args.settle, min(rates))
        turn = 0
        for round_ in range(1, args.rounds + 1):
            for rate in rates:
                first = turn % len(targets)
                for target in targets[first:] + targets[:first]:
                    phases.append(phase(settings, target, rate, round_, args.warm_up, args.seconds))
                    console.print(phases_table(phases[-1:]))
                turn += 1
        idles = idle(targets, args.idle)
    console.print(phases_table(phases))
    for i in idles:
        console.print(
            f"idle {i.target}: {100 * i.cores:.1f}% of a core, {i.rss_mb:,.0f} MB resident, "
            f"{i.pss_mb:,.0f} MB proportional"
        )
    for rate, ratio in ratios(phases).items():
        said = ", ".join(f"{key} {value:.2f}" for key, value in ratio.items())
        console.print(f"{rate:,} events/s over Flink: {said}")
    return phases, idles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rates",
        default="1000,5000,20000",
        help="steady loads, events/s, comma-separated (none: no steady phases)",
    )
    parser.add_argument(
        "--settle", type=int, default=120, help="seconds of the lowest rate each target first gets"
    )
    parser.add_argument(
        "--warm-up", type=int, default=20, help="seconds of load before each measured phase"
    )
    parser.add_argument(
        "--seconds", type=int, default=int(2 * CHECKPOINT + 10), help="seconds measured"
    )
    parser.add_argument("--rounds", type=int, default=1, help="measured phases of each target")
    parser.add_argument("--idle", type=int, default=300, help="seconds the targets idle, measured")
    parser.add_argument(
        "--catch-up",
        type=int,
        default=0,
        help="then each target drains a topic preloaded with this many events (0: none)",
    )
    parser.add_argument(
        "--targets", default=",".join(TARGETS), help=f"which of {', '.join(TARGETS)} run"
    )
    args = parse_arguments(parser)
    if args.smoke:
        args.rates, args.settle, args.warm_up, args.seconds = "500", 0, 2, 3
        args.rounds, args.idle, args.targets, args.catch_up = 1, 5, "router,floor", 2_000
    chosen = [t for t in TARGETS if t in args.targets.split(",")]
    if set(args.targets.split(",")) - set(TARGETS) or "router" not in chosen:
        parser.error(f"--targets: the router and any of {', '.join(TARGETS[1:])}")
    if args.write_docs and chosen != list(TARGETS):
        parser.error("--write-docs: the page gives every target's figures")
    rates = [int(r) for r in args.rates.split(",") if r and r != "none"]
    settings = Settings()
    # Stopped (SIGTERM) as when interrupted: the streams, topics and jobs it made go.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    topics: list[str] = []  # made, and deleted
    phases, idles = steady(settings, chosen, rates, args, topics) if rates else ([], [])
    drained = catch_ups(settings, chosen, args.catch_up, topics) if args.catch_up else []
    figures = {
        "smoke": args.smoke,
        "topics": topics,
        "phases": [asdict(p) for p in phases],
        "idle": [asdict(i) for i in idles],
        "ratios": ratios(phases),
        "catch_up": [asdict(c) for c in drained],
    }
    save_figures(settings, "deployed", figures)
    if args.write_docs and phases:
        write_section(
            "deployed-bench", "The router as deployed, beside Flink", markdown(phases, idles, args)
        )
    if args.write_docs and drained:
        write_section("deployed-catch-up-bench", "Catching up", catch_up_markdown(drained, args))
    if args.write_docs:
        console.print("wrote docs/benchmarks.md")


if __name__ == "__main__":
    main()
