"""What an idle stream costs: the CPU and memory of routers with no traffic at all, on the running
stack (issue 33: Keystone ran about 2,000 routers).

    python -m keystone.loadtest.idle_bench [--streams 1,5,10] [--settle 600] [--seconds 60]
                                           [--smoke] [--write-docs]

1. For each count of `--streams`, that many streams like the demo's (two Real-time Mode outputs,
   an exactly-once Kafka output, a back-to-back Elasticsearch output, a Hive output and the
   archive; 4 partitions), provisioned through control, with no event at all: once every
   router runs and has run `--settle` seconds, each router's CPU (its Python driver and its
   JVM, from /proc) over `--seconds` as a share of one core, and its memory (resident and
   proportional, at the end). Where the first router's JVM spends it, by thread. The settling
   is long because a router's JIT compilers go on compiling for minutes: three minutes after
   its start, half an idle router's CPU was still theirs.
2. Beside them, metered in the same windows, Spark's floor for the first (`floor`): an
   application of the router's size running, for each of its queries, one that does the least
   a routing can, triggered the same way, on the same topic.
3. One of them busy again: one event written to its fronting topic, timed until it is in the
   Real-time Mode Kafka output and in Elasticsearch.

Every stream, topic and index the benchmark makes is deleted when it ends, whether it ended
well or not. `--smoke` runs one stream for a few seconds: it checks that the benchmark runs,
its figures mean nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka import OFFSET_END, Consumer, TopicPartition

from keystone.contracts import envelope, kafka_clients
from keystone.contracts.elasticsearch import Connection
from keystone.contracts.names import fronting_topic, index_prefix, output_topic
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec, load_spec
from keystone.control.client import ControlClient, ControlError
from keystone.control.launcher import Deployment
from keystone.ingest_proxy.client import DirectProducer
from keystone.loadtest.bench import (
    CpuMeter,
    delete_streams,
    machine,
    parse_arguments,
    process_tree,
    proportional_mb,
    resident_mb,
    save_figures,
    spark_processes,
    stream_topics,
    write_section,
)
from keystone.loadtest.run import await_routers
from keystone.loadtest.spark_floor import least_query
from keystone.router.plan import QueryPlan, batch_limit, query_plan, started_slots
from keystone.router.spark import end_session, spark_session
from keystone.router.topics import delete_topics
from keystone.terminal import console

COMMAND = "python -m keystone.loadtest.idle_bench --write-docs"
OWNER, APP, PARTITIONS = "bench-idle", "bench_idle", 4
BUSY_WAIT_SECONDS = 120.0


def spec(name: str) -> dict:
    """The demo stream's outputs (`keystone demo`), without a filter to match."""
    realtime = {"mode": "realtime", "trigger": "60 seconds"}
    return {
        "name": name,
        "owner": OWNER,
        "partitions": PARTITIONS,
        "producers": [APP],
        "outputs": [
            {"name": "kafka", "sink": {"type": "kafka"}, "delivery": realtime},
            {
                "name": "once",
                "sink": {"type": "kafka"},
                "delivery": {
                    "mode": "microbatch",
                    "trigger": "5 seconds",
                    "guarantee": "exactly_once",
                },
            },
            {"name": "search", "sink": {"type": "elasticsearch"}},
            {
                "name": "warehouse",
                "sink": {"type": "hive"},
                "delivery": {"mode": "microbatch", "trigger": "10 seconds"},
            },
            {"name": "copy", "sink": {"type": "kafka"}, "delivery": realtime},
        ],
    }


@dataclass
class Idle:
    """Routers idle together: per router, CPU as % of one core and memory (MB), resident and
    proportional (`loadtest.bench.proportional_mb`); beside them, in the same window, Spark's
    floor for one of them (`floor`)."""

    streams: int
    cpu_percent: list[float]  # each router, its Python driver and its JVM together
    jvm_percent: list[float]
    python_percent: list[float]
    rss_mb: list[float]
    pss_mb: list[float]
    floor_percent: float
    floor_pss_mb: float

    @property
    def median(self) -> float:
        return statistics.median(self.cpu_percent)


def thread_cpu(pid: int) -> dict[tuple[str, str], float]:
    """CPU seconds of each live thread of a process, by (thread id, name)."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            stat, name = (task / "stat").read_text(), (task / "comm").read_text().strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        found[(task.name, name)] = (int(fields[11]) + int(fields[12])) / tick
    return found


def by_thread(before: dict, after: dict, seconds: float) -> dict[str, float]:
    """% of a core per kind of thread (numbers in names folded), most first."""
    kinds: Counter[str] = Counter()
    for key, spent in after.items():
        kinds[re.sub(r"\d+", "#", key[1])] += spent - before.get(key, 0.0)
    return {k: round(100 * v / seconds, 2) for k, v in kinds.most_common() if v > 0}


@contextmanager
def floor(settings: Settings, spec: StreamSpec) -> Iterator[Callable[[], list[int]]]:
    """Spark's floor for an idle router of `spec`: an application as its (the same
    configuration and task slots), running one query doing the least a routing can
    (`spark_floor.least_query`) for each query the router runs, each triggered as the router's
    would be (`router.plan.query_plan`), on the stream's fronting topic; yields its processes."""
    topic, limit = fronting_topic(spec.name), batch_limit(spec)
    plans = [query_plan(o, None, topic=topic, batch_limit=limit) for o in spec.outputs]
    if spec.archive.enabled:
        plans.append(QueryPlan("latest", limit, spec.archive.trigger, real_time=False))
    slots = started_slots(spec, None, settings.spark_master)
    spark = spark_session(settings, "keystone-idle-bench-floor", slots=slots)
    with tempfile.TemporaryDirectory(prefix="idle-floor-") as checkpoints:
        try:
            for n, plan in enumerate(plans):
                least_query(
                    spark,
                    settings,
                    spec.name,
                    sink=f"{spec.name}.floor",
                    name=f"floor-{n}",
                    checkpoint=f"{checkpoints}/{n}",
                    plan=plan,
                )
            yield spark_processes(spark)
        finally:
            end_session(spark)


def measure(
    settings: Settings, streams: list[str], seconds: float, floor: Callable[[], list[int]]
) -> tuple[Idle, dict[str, float]]:
    routers = {}
    for name in streams:
        deployed = Deployment.load(settings, name)
        if deployed is None or not deployed.alive():
            raise RuntimeError(f"the router of {name} is not running")
        jvm = [p for p in process_tree(deployed.pid) if p != deployed.pid]
        routers[name] = (deployed.pid, jvm)
    first_jvm = routers[streams[0]][1][0]
    meters = {
        name: (CpuMeter(lambda p=py: [p], every=None), CpuMeter(lambda j=jvm: j, every=None))
        for name, (py, jvm) in routers.items()
    }
    floor_meter = CpuMeter(floor, every=None)
    threads_before = thread_cpu(first_jvm)
    with ExitStack() as running:
        for meter in (floor_meter, *(m for pair in meters.values() for m in pair)):
            running.enter_context(meter)
        time.sleep(seconds)
    threads = by_thread(threads_before, thread_cpu(first_jvm), seconds)
    py = [100 * meters[n][0].seconds / seconds for n in streams]
    jv = [100 * meters[n][1].seconds / seconds for n in streams]
    rss = [resident_mb([p, *j]) for p, j in routers.values()]
    pss = [proportional_mb([p, *j]) for p, j in routers.values()]
    total = [a + b for a, b in zip(py, jv, strict=True)]
    floor_percent = 100 * floor_meter.seconds / seconds
    idle = Idle(len(streams), total, jv, py, rss, pss, floor_percent, proportional_mb(floor()))
    return idle, threads


def busy_again(settings: Settings, stream: str) -> dict[str, float]:
    """Seconds from one event written to its fronting topic until the Real-time Mode Kafka
    output and Elasticsearch have it."""
    topic = output_topic(stream, "kafka")
    consumer = Consumer(
        kafka_clients.librdkafka(settings)
        | {
            "group.id": f"idle-bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in parts])
    consumer.poll(1.0)  # the assignment takes effect: "the end" is now
    producer = DirectProducer(kafka_clients.librdkafka(settings), APP)
    sent = time.monotonic()
    guid = producer.send(stream, [{"n": 1, "kind": "wake"}]).guids[0]
    found: dict[str, float] = {}
    search = f"/{index_prefix(stream, 'search')}*/_search"
    deadline = sent + BUSY_WAIT_SECONDS
    es = Connection.of(settings).client(timeout=5)
    try:
        while len(found) < 2 and time.monotonic() < deadline:
            message = consumer.poll(0.05)
            if message is not None and message.error() is None and "kafka" not in found:
                headers = dict(message.headers() or [])
                if headers.get(envelope.GUID, b"").decode() == guid:
                    found["kafka"] = time.monotonic() - sent
            if "elasticsearch" not in found:
                answer = es.get(search, params={"q": f"_id:{guid}"})
                if answer.status_code == 200 and answer.json()["hits"]["total"]["value"]:
                    found["elasticsearch"] = time.monotonic() - sent
    finally:
        consumer.close()
        es.close()
    return {k: round(v, 2) for k, v in found.items()}


def cleanup(settings: Settings, control: ControlClient, streams: list[str]) -> list[str]:
    """Deletes the streams, then (once their routers stopped) their topics and indices;
    returns the topics deleted."""
    deleted = []
    for made in delete_streams(settings, control, streams):
        deleted += stream_topics(made)
        delete_topics(settings, stream_topics(made))
        prefix = index_prefix(made.name, "search")
        with Connection.of(settings).client() as es:
            es.delete(f"/{prefix}*")
    return deleted


def markdown(figures: dict) -> str:
    rows = [
        "| idle streams | CPU per stream, % of a core (median; min-max) | its JVM | its Python "
        "| memory per router, MB | its proportional share, MB | all routers, % of the machine "
        "| Spark's floor beside them, % of a core | its proportional share, MB |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    cores = os.cpu_count() or 1
    for run in figures["idle"]:
        cpu = run["cpu_percent"]
        rows.append(
            f"| {run['streams']} | {statistics.median(cpu):.1f} ({min(cpu):.1f}-{max(cpu):.1f}) "
            f"| {statistics.median(run['jvm_percent']):.1f} "
            f"| {statistics.median(run['python_percent']):.1f} "
            f"| {statistics.median(run['rss_mb']):,.0f} "
            f"| {statistics.median(run['pss_mb']):,.0f} | {sum(cpu) / cores:.1f} "
            f"| {run['floor_percent']:.1f} | {run['floor_pss_mb']:,.0f} |"
        )
    threads = ", ".join(f"{k} {v}" for k, v in list(figures["threads"].items())[:8])
    busy = figures["busy_again_s"]
    return (
        f"Command: `{COMMAND}`, {figures['date']}; {figures['machine']}.  \n"
        f"Streams like the demo's (two Real-time Mode outputs, an exactly-once Kafka output, a "
        f"back-to-back Elasticsearch output, a Hive output, the archive; {PARTITIONS} "
        f"partitions), no traffic, measured over {figures['seconds']:.0f} s once every router "
        f"had run {figures['settle']:.0f} s. Spark's floor: an application of the router's "
        f"size running, for each of its queries, one that does the least a routing can "
        f"(`loadtest.spark_floor`), triggered the same way, metered in the same window.\n\n"
        + "\n".join(rows)
        + f"\n\nWhere one idle router's JVM spends it (% of a core, by thread): {threads}.  \n"
        f"Busy again: one event after the idle period reached the Real-time Mode Kafka output "
        f"in {busy.get('kafka', 'more than 120')} s and Elasticsearch in "
        f"{busy.get('elasticsearch', 'more than 120')} s.\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", default="1,5,10", help="counts of idle streams, rising")
    parser.add_argument("--settle", type=float, default=600.0, help="seconds before measuring")
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds measured")
    args = parse_arguments(parser)
    settings = Settings()
    counts = sorted({int(n) for n in args.streams.split(",")})
    settle, seconds = args.settle, args.seconds
    if args.smoke:
        counts, settle, seconds = [1], 2.0, 3.0
    names = [f"idle_{n}" for n in range(1, max(counts) + 1)]
    runs, threads, busy, topics = [], {}, {}, []
    with ControlClient.from_settings(settings) as control, ExitStack() as floors:
        try:
            try:
                control.create_app(APP)
            except ControlError as e:
                if e.status != 409:
                    raise
            made: list[str] = []
            floor_pids = None
            for count in counts:
                for name in names[len(made) : count]:
                    control.put_stream(spec(name))
                    made.append(name)
                await_routers(control, made, console)
                if floor_pids is None:  # its queries read the first stream's fronting topic
                    floor_pids = floors.enter_context(floor(settings, load_spec(spec(made[0]))))
                with console.status(f"{count} idle routers settling {settle:.0f} s…"):
                    time.sleep(settle)
                idle, seen = measure(settings, made, seconds, floor_pids)
                threads = threads or seen
                runs.append(idle)
                console.print(
                    f"{count} idle streams: {idle.median:.1f}% of a core each (median), "
                    f"{statistics.median(idle.rss_mb):,.0f} MB each "
                    f"({statistics.median(idle.pss_mb):,.0f} MB proportional); Spark's floor "
                    f"beside them {idle.floor_percent:.1f}%, {idle.floor_pss_mb:,.0f} MB"
                )
            busy = busy_again(settings, made[0])
            console.print(f"busy again: {busy}")
        finally:
            floors.close()  # before the topic its queries read goes
            topics = cleanup(settings, control, names)
    figures = {
        "smoke": args.smoke,
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "settle": settle,
        "seconds": seconds,
        "idle": [asdict(r) for r in runs],
        "threads": threads,
        "busy_again_s": busy,
        "topics": topics,  # made, and deleted
    }
    save_figures(settings, "idle", figures)
    if args.write_docs:
        write_section("idle-bench", "Idle streams", markdown(figures))
        console.print("wrote docs/benchmarks.md")


if __name__ == "__main__":
    main()
