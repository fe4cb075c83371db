"""The benchmarks' shared pieces, and each benchmark of `make bench` run in its smoke mode on
the test stack: it finishes, writes its figures (events, events/s and CPU per million events)
and leaves no topic behind."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
from confluent_kafka.admin import AdminClient

from keystone.contracts import kafka_clients
from keystone.contracts.spec import load_spec
from keystone.loadtest import flink_job
from keystone.loadtest.bench import (
    CpuMeter,
    Steadiness,
    cpu_steadiness,
    cpu_times,
    per_million,
    process_tree,
    stream_topics,
)
from keystone.loadtest.router_bench import FILTER, PROJECTION
from tests.support.stack import Stack, checked, run_module


def test_steadiness_counts_the_samples_near_the_fastest_as_full_speed() -> None:
    # A host that runs the unit at full speed (250-280 µs) 40% of the time and at 410 µs otherwise.
    cpu = Steadiness.of([410.0] * 60 + [250.0] * 30 + [280.0] * 10)
    assert (cpu.p10_us, cpu.p50_us, cpu.p90_us) == (250.0, 410.0, 410.0)
    assert cpu.full_speed == 0.4  # 250 and 280 are within 15% of 250; 410 is not
    assert str(cpu) == (
        "a fixed unit of work took 250 / 410 / 410 µs of CPU (p10 / p50 / p90), "
        "at full speed 40% of the time"
    )


def test_steadiness_is_sampled_from_this_machine() -> None:
    cpu = cpu_steadiness(0.5)
    assert 0 < cpu.p10_us <= cpu.p50_us <= cpu.p90_us
    assert 0 < cpu.full_speed <= 1


def _burn(seconds: float) -> float:
    """Burns about `seconds` of this process' CPU; the CPU time it took, as Python tells it."""
    start = time.process_time()
    while time.process_time() - start < seconds:
        sum(range(10_000))
    return time.process_time() - start


def test_the_cpu_meter_counts_what_this_process_burns() -> None:
    with CpuMeter(lambda: [os.getpid()], every=None) as meter:
        burned = _burn(0.5)
    # /proc counts in clock ticks (10 ms); the meter's own reads are the rest.
    assert burned - 0.03 <= meter.seconds <= burned + 0.1


def test_the_cpu_meter_counts_a_process_started_meanwhile_from_its_start() -> None:
    # The child burns 0.4 s of CPU, says so, and waits to be told to end. It counts its CPU in
    # the kernel's clock ticks (os.times), as /proc does: time.process_time's finer clock can
    # see 0.4 s where the ticks show 0.39.
    burner = (
        "import os, sys\nt = sum(os.times()[:2])\n"
        "while sum(os.times()[:2]) - t < 0.4: pass\nprint(flush=True)\nsys.stdin.read()"
    )
    with CpuMeter(lambda: process_tree(os.getpid()), every=None) as meter:
        before = sum(cpu_times([os.getpid()]).values())
        child = subprocess.Popen(
            [sys.executable, "-c", burner], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert child.stdout is not None and child.stdin is not None
        child.stdout.readline()
        assert child.pid in process_tree(os.getpid())
        mine = sum(cpu_times([os.getpid()]).values()) - before
    child.stdin.close()
    child.wait(timeout=30)
    assert child.pid not in process_tree(os.getpid())
    # The child's 0.4 s and its interpreter's start-up, beside this process' own.
    assert 0.4 <= meter.seconds - mine <= 1.5


def test_the_cpu_meter_leaves_out_processes_it_is_not_given() -> None:
    with CpuMeter(list, every=None) as meter:
        _burn(0.1)
    assert meter.seconds == 0
    assert process_tree(2**22 + 1) == []  # no such process


def test_cpu_per_million_events() -> None:
    assert per_million(3.0, 1_500_000) == 2.0
    assert per_million(None, 10) is None
    assert per_million(1.0, 0) is None


def test_a_streams_topics_are_its_fronting_dead_letter_and_kafka_output_topics() -> None:
    spec = load_spec(
        {
            "name": "bench_x",
            "owner": "bench",
            "outputs": [
                {"name": "out", "sink": {"type": "kafka"}},
                {"name": "mine", "sink": {"type": "kafka", "topic": "elsewhere"}},
                {"name": "search", "sink": {"type": "elasticsearch"}},
            ],
        }
    )
    assert stream_topics(spec) == [
        "keystone.bench_x",
        "keystone.bench_x.dlq",
        "bench_x.out",
        "elsewhere",
    ]


# The smoke modes, on the test stack: one at a time (each is a Spark application, or loads the
# proxy), each in its own process as `make bench` runs it.


def _topics(stack: Stack) -> set[str]:
    """The stack's topics but Kafka's own (`__consumer_offsets`, made by a first consumer)."""
    admin = AdminClient(kafka_clients.librdkafka(stack.settings))
    return {t for t in admin.list_topics(timeout=30).topics if not t.startswith("__")}


def _stream_of(topic: str) -> str:
    """The stream a topic is of: `keystone.<stream>[.dlq...]`, else `<stream>.<output>`."""
    parts = topic.split(".")
    return parts[1] if parts[0] == "keystone" and len(parts) > 1 else parts[0]


def _its(topics: set[str], streams: set[str]) -> set[str]:
    return {t for t in topics if _stream_of(t) in streams}


def _smoke(
    stack: Stack, module: str, result: str, *args: str, timeout: float, per_event: bool = True
) -> dict:
    """Runs the benchmark's smoke mode; its figures, once it has left no topic behind (and,
    `per_event`, each of its rows has a CPU figure per event)."""
    before = _topics(stack)
    out = stack.state_dir / "bench" / result
    out.unlink(missing_ok=True)
    started = time.monotonic()
    result = checked(
        run_module(f"keystone.loadtest.{module}", "--smoke", *args, env=stack.env, timeout=timeout)
    )
    print(f"{module} --smoke {' '.join(args)}: {time.monotonic() - started:.0f} s")
    print(result.stdout)  # shown if the test fails
    figures = json.loads(out.read_text())
    assert figures["smoke"] is True
    made = set(figures["topics"])
    assert not made & before, "a benchmark's topics are its own"
    # Deleted before it ended; the broker's metadata may take a moment to say so. Every topic
    # a benchmark makes is one of its streams' (other tests make theirs meanwhile, in a
    # parallel run): none of those may be left.
    streams = {_stream_of(t) for t in made}
    deadline = time.monotonic() + 30
    while (left := _its(_topics(stack) - before, streams)) and time.monotonic() < deadline:
        time.sleep(1)
    assert not left, f"{module} left topics behind (it deleted {sorted(made)})"
    if per_event:
        for row in figures["results"]:
            assert row["cpu_s_per_m_events"] > 0, row
    return figures


def _measured(figures: dict) -> list[dict]:
    """The rows that measure a rate (a latency run's do not)."""
    rows = [r for r in figures["results"] if r["events_per_second"] is not None]
    assert rows
    for row in rows:
        assert row["events"] > 0 and row["events_per_second"] > 0, row
    return rows


@pytest.mark.timeout(300)
def test_the_proxy_benchmark_smoke(stack: Stack) -> None:
    figures = _smoke(stack, "proxy_bench", "proxy.json", timeout=240)
    rows = _measured(figures)
    assert [r["name"].split(",")[0] for r in rows] == [
        "raw confluent-kafka",
        *["proxy peak"] * 3,
        *["proxy steady"] * 2,
    ]
    assert len(figures["topics"]) == 2  # its stream's fronting and dead-letter topics


@pytest.mark.timeout(600)
def test_the_router_benchmark_smoke(stack: Stack) -> None:
    figures = _smoke(stack, "router_bench", "router.json", timeout=540)
    assert [r["name"].split(",")[0] for r in _measured(figures)] == [
        "router",
        "hand-written Spark job",
    ]
    latency = [r for r in figures["results"] if r["events_per_second"] is None]
    assert [r["name"].split(",")[1].split()[0] for r in latency] == ["realtime", "microbatch"]
    for row in latency:
        assert row["events"] > 0 and 0 <= row["p50_ms"] <= row["p99_ms"], row
    # The throughput stream's (with the hand-written job's topic) and each latency stream's.
    assert len(figures["topics"]) == 4 + 3 + 3
    assert any(t.endswith(".handwritten") for t in figures["topics"])


@pytest.mark.timeout(420)
def test_the_exactly_once_benchmark_smoke(stack: Stack) -> None:
    figures = _smoke(stack, "exactly_once_bench", "exactly_once.json", timeout=360)
    rows = _measured(figures)
    assert [(r["name"], r["guarantee"]) for r in rows] == [
        ("throughput, at least once", "at_least_once"),
        ("throughput, exactly once", "exactly_once"),
    ]
    assert figures["ratio"] > 0
    latency = [r for r in figures["results"] if r["events_per_second"] is None]
    assert [r["guarantee"] for r in latency] == ["at_least_once", "exactly_once"]
    for row in latency:
        assert row["events"] > 0 and 0 <= row["p50_ms"] <= row["p99_ms"], row
    assert len(figures["topics"]) == 3 * 3  # each stream's fronting, dead-letter and output topics


@pytest.mark.timeout(900)
def test_the_end_to_end_benchmark_smoke(stack: Stack) -> None:
    figures = _smoke(stack, "e2e_bench", "e2e.json", timeout=840)
    [row] = _measured(figures)
    assert row["lossless"] and row["drained"], row
    assert row["router_cpu_s_per_m_events"] > 0 and row["proxy_cpu_s_per_m_events"] > 0
    assert (stack.state_dir / "bench" / "e2e-smoke" / "report.md").exists()


@pytest.mark.timeout(420)
def test_the_recovery_benchmark_smoke(stack: Stack) -> None:
    figures = _smoke(stack, "recovery_bench", "recovery.json", timeout=360)
    rows = _measured(figures)
    assert [r["name"] for r in rows] == ["kafka", "hive"]  # the smoke's two ways to ask
    for row in rows:  # the loaded events, and the live ones until it was asked
        assert row["events"] >= 3000 and row["live_records"] > 0, row
    [backfilled] = figures["backfills"]  # the smoke backfills the Kafka output only
    assert backfilled["name"] == "kafka" and backfilled["events"] == 3000  # the loaded hour
    assert backfilled["events_per_second"] > 0 and backfilled["cpu_s_per_m_events"] > 0
    # Fronting, dead letters and its two Kafka outputs (a smoke's stream has no Keystone
    # output, so no second stream).
    assert len(figures["topics"]) == 4


@pytest.mark.timeout(420)
def test_the_idle_benchmark_smoke(stack: Stack) -> None:
    figures = _smoke(stack, "idle_bench", "idle.json", timeout=360, per_event=False)
    [idle] = figures["idle"]  # the smoke's one stream
    assert idle["streams"] == 1 and idle["cpu_percent"][0] > 0 and idle["rss_mb"][0] > 100
    assert idle["floor_percent"] > 0 and idle["floor_pss_mb"] > 100  # Spark's, beside it
    assert 0 < idle["pss_mb"][0] <= idle["rss_mb"][0]
    assert idle["jvm_percent"][0] > 0 and idle["python_percent"][0] >= 0
    assert figures["threads"], "where its JVM spends its CPU"
    assert set(figures["busy_again_s"]) == {"kafka", "elasticsearch"}  # woke within 120 s
    assert len(figures["topics"]) == 5  # fronting, dead letters, its three Kafka outputs


@pytest.mark.timeout(360)
def test_the_deployed_router_benchmark_smoke(stack: Stack) -> None:
    figures = _smoke(stack, "deployed_bench", "deployed.json", timeout=300, per_event=False)
    phases = {p["target"]: p for p in figures["phases"]}  # the smoke's router and floor, one rate
    assert sorted(phases) == ["floor", "router"] and len(figures["phases"]) == 2, phases
    for phase in phases.values():
        assert phase["events"] > 0 and phase["delivered"] > 0, phase
        assert phase["missing"] == 0, phase  # every measured event the filter keeps read back
        assert phase["cores"] > 0 and phase["cpu_s_per_m_events"] > 0, phase
        assert 0 <= phase["p50_ms"] <= phase["p99_ms"] <= phase["p999_ms"] <= phase["max_ms"]
    # The floor keeps what the router's filter keeps (the pool alternates `variant`).
    assert phases["floor"]["delivered"] == phases["router"]["delivered"] == 750, phases
    idles = {i["target"]: i for i in figures["idle"]}
    assert sorted(idles) == ["floor", "router"], idles
    assert all(
        i["cores"] > 0 and 0 < i["pss_mb"] <= i["rss_mb"] and i["rss_mb"] > 100
        for i in idles.values()
    ), idles
    assert figures["ratios"] == {}  # no Flink in a smoke run
    # Then each drains 2,000 preloaded events: the router from an output added from the
    # earliest, the floor from its earliest offsets; every kept one written.
    caught = {c["target"]: c for c in figures["catch_up"]}
    assert sorted(caught) == ["floor", "router"], caught
    for c in caught.values():
        assert c["events"] == 2_000 and c["delivered"] >= 1_000, c
        assert c["events_per_second"] > 0 and c["cpu_s_per_m_events"] > 0, c
    # Its streams' fronting, dead-letter and output topics, and the floor's two, twice.
    assert len(figures["topics"]) == 10


@pytest.mark.timeout(360)
def test_the_shadow_benchmark_smoke(stack: Stack) -> None:
    figures = _smoke(stack, "shadow_bench", "shadow.json", timeout=300, per_event=False)
    phases = {p["target"]: p for p in figures["phases"]}
    assert sorted(phases) == ["router", "router with a shadow"], phases
    for phase in phases.values():
        assert phase["delivered"] == 750 and phase["missing"] == 0, phase
        assert 0 < phase["p50_ms"] <= phase["p99_ms"] and phase["cpu_s_per_m_events"] > 0, phase
    assert set(figures["ratios"]["500"]) == {"p50", "p99", "cpu"}
    streams = {_stream_of(t) for t in figures["topics"]}
    shadows = {t for t in _topics(stack) if t.startswith("keystone-shadow")}
    assert not {t for t in shadows if any(f".{s}-" in t for s in streams)}  # its shadow's, gone


def test_the_flink_job_routes_as_the_router_benchmarks_output() -> None:
    # Its SQL is written by hand, as a Flink user would: held here to the router's routing.
    assert FILTER == "variant = 'a'" and "WHERE `variant` = 'a'" in flink_job.ROUTE
    fields = [p.split(" as ")[-1] for p in PROJECTION]
    assert fields == ["guid", "timestamp", "user_id", "device", "title"]
    assert re.findall(r"^  `(\w+)` ", flink_job.SINK, re.M) == [*fields, "headers"]
    assert "'key.fields' = 'guid'" in flink_job.SINK  # the router's Kafka key
