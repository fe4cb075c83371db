"""What exactly once costs: a Kafka output written in transactions against the same output at
least once, on the running stack.

    python -m keystone.loadtest.exactly_once_bench [--events 300000] [--rounds 3] [--rate 5000]
                                                   [--seconds 30] [--smoke] [--write-docs]

1. throughput: 1 KB events preloaded on a fronting topic, read from the start by the router's
   output query (micro-batches of at most 100,000 events, a 1-second trigger, the router
   benchmark's filter and projection), once at least once (Spark's Kafka sink) and once exactly
   once (transactions), built by `router.job.Router` as the router runs them. A warm-up round
   of each, left out, then rounds in which they take turns going first; events/s is input rows
   over the time Spark spent in their batches (query progress), the first batch left out; the
   median of the rounds, and exactly once over at least once.
2. latency: a steady `--rate` of events produced (from another process) while the output runs
   with a 1-second and a 5-second trigger, each guarantee; latency is when a `read_committed`
   consumer (another process) receives the record minus the event's ingest time (`ks_ts`): for
   exactly once a record is readable only once its transaction commits. p50 and p99, after
   10 s of the same load to warm up.

Beside events/s, CPU seconds per million events read (this Spark application's processes, as
in the router benchmark). Every topic and checkpoint the benchmark makes is deleted when it
ends, whether it ended well or not. `--smoke` reads 5,000 events in one round and runs each
latency for a few seconds: it checks that the benchmark runs, its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import time
import uuid
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection

from confluent_kafka import OFFSET_END, Consumer, TopicPartition
from pyspark.sql import SparkSession
from rich.progress import Progress

from keystone.contracts import kafka_clients
from keystone.contracts.names import fronting_topic, output_topic
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec, load_spec
from keystone.control.provisioner import ensure_topics
from keystone.loadtest.bench import (
    CPU_COLUMN,
    CpuMeter,
    machine,
    parse_arguments,
    per_million,
    produce,
    save_figures,
    spark_processes,
    stream_topics,
    write_section,
)
from keystone.loadtest.router_bench import (
    FILTER,
    PARTITIONS,
    PROJECTION,
    Leftovers,
    cell,
    rate_of,
    results_table,
)
from keystone.router.job import Router
from keystone.router.metrics import RouterMetrics
from keystone.router.plan import router_slots
from keystone.router.spark import spark_session
from keystone.router.topics import create_topics
from keystone.terminal import console

COMMAND = "python -m keystone.loadtest.exactly_once_bench --write-docs"
GUARANTEES = ("at_least_once", "exactly_once")
WARM_UP_SECONDS = 10
CPU_COUNTS = (
    "this Spark application's processes (its JVM and this Python process; not the producer's "
    "or the consumer's), for throughput from each query's start to its stop (the median of the "
    "rounds), for latency over the measured load; per million events read"
)


@dataclass
class Result:
    name: str
    guarantee: str
    events_per_second: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    events: int = 0
    rounds: list[float] = field(default_factory=list)  # events/s of each throughput round
    cpu_s_per_m_events: float | None = None


def spec(name: str, guarantee: str, trigger: str) -> StreamSpec:
    delivery = {"mode": "microbatch", "trigger": trigger, "guarantee": guarantee}
    output = {
        "name": "out",
        "filter": FILTER,
        "projection": PROJECTION,
        "sink": {"type": "kafka"},
        "delivery": delivery,
        "start": "earliest",
    }
    return load_spec(
        {
            "name": name,
            "owner": "bench",
            "partitions": PARTITIONS,
            "archive": {"enabled": False},
            "outputs": [output],
        }
    )


def throughput(
    spark: SparkSession,
    settings: Settings,
    events: int,
    rounds: int,
    leftovers: Leftovers,
    warm_up: bool = True,
) -> list[Result]:
    name = f"bench_eo_tp_{uuid.uuid4().hex[:6]}"
    specs = {g: spec(name, g, "1 second") for g in GUARANTEES}
    leftovers.topics += stream_topics(specs["at_least_once"])
    ensure_topics(settings, specs["at_least_once"])
    with console.status(f"producing {events:,} events of 1 KB…"):
        produce(settings, fronting_topic(name), events, stream=name)
    rates: dict[str, list[float]] = {g: [] for g in GUARANTEES}
    cpu: dict[str, list[float]] = {g: [] for g in GUARANTEES}
    processes = spark_processes(spark)
    with Progress(console=console) as progress:
        for round_ in range(0 if warm_up else 1, rounds + 1):
            order = GUARANTEES if round_ % 2 else GUARANTEES[::-1]
            for guarantee in order:
                # A fresh state folder, so fresh checkpoints (and a new transactional group):
                # each round reads the whole topic.
                fresh = settings.model_copy(
                    update={"state_dir": settings.state_dir / "bench" / uuid.uuid4().hex}
                )
                leftovers.folders.append(fresh.state_dir)
                stream = specs[guarantee]
                with CpuMeter(processes, every=None) as meter:
                    router = Router(spark, fresh, stream, RouterMetrics(name))
                    query = router.start_output(stream.outputs[0])
                    label = f"{guarantee}, " + (f"round {round_}" if round_ else "warm-up")
                    rate = rate_of(query, events, progress, label)
                if round_:
                    rates[guarantee].append(rate)
                    cpu[guarantee].append(meter.seconds)
    return [
        Result(
            f"throughput, {g.replace('_', ' ')}",
            g,
            statistics.median(rates[g]),
            events=events,
            rounds=rates[g],
            cpu_s_per_m_events=per_million(statistics.median(cpu[g]), events),
        )
        for g in GUARANTEES
    ]


def receive(settings: Settings, topic: str, since_ms: int, pipe: Connection) -> None:
    """In its own process: reads `topic`'s committed records from its end (says so on `pipe`
    once there), until told to stop, then sends back the latency of each record of an event
    ingested at `since_ms` or later."""
    consumer = Consumer(
        kafka_clients.librdkafka(settings)
        | {
            "group.id": f"bench-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in partitions])
    consumer.poll(1.0)  # joined the partitions before the load starts
    pipe.send(True)
    latencies: list[int] = []
    while not pipe.poll():
        for message in consumer.consume(1000, timeout=0.2):
            if message.error() is not None:
                continue
            now = int(time.time() * 1000)
            stamp = json.loads(message.value())["timestamp"]
            if stamp >= since_ms:
                latencies.append(now - stamp)
    consumer.close()
    pipe.send(latencies)


def latency(
    spark: SparkSession,
    settings: Settings,
    guarantee: str,
    trigger: str,
    rate: int,
    seconds: int,
    leftovers: Leftovers,
    warm_up: int = WARM_UP_SECONDS,
    slack: int = 5,
) -> Result:
    """`slack`: seconds waited past the trigger interval for the last batch to commit."""
    name = f"bench_eo_lat_{uuid.uuid4().hex[:6]}"
    stream = spec(name, guarantee, trigger)
    topic = output_topic(name, "out")
    leftovers.topics += stream_topics(stream)
    leftovers.folders.append(settings.checkpoints_dir / name)
    ensure_topics(settings, stream)
    create_topics(settings, {topic: PARTITIONS})
    query = Router(spark, settings, stream, RouterMetrics(name)).start_output(stream.outputs[0])
    spawn = multiprocessing.get_context("spawn")
    label = f"{guarantee.replace('_', ' ')}, trigger {trigger}"
    with console.status(f"{label}: waiting for the query to run…"):
        while not query.recentProgress and query.isActive:
            time.sleep(0.5)

    def load(events: int) -> None:
        topic = fronting_topic(name)
        producer = spawn.Process(target=produce, args=(settings, topic, events, rate, name))
        producer.start()
        producer.join()
        assert producer.exitcode == 0, "the producer failed"

    with console.status(f"{label}: warming up, {rate:,} events/s for {warm_up} s…"):
        load(rate * warm_up)
    measured_from = int(time.time() * 1000)
    ours, theirs = spawn.Pipe()
    consumer = spawn.Process(target=receive, args=(settings, topic, measured_from, theirs))
    consumer.start()
    ours.recv()  # the consumer is at the topic's end
    with console.status(f"{label}: {rate:,} events/s for {seconds} s…"):
        with CpuMeter(spark_processes(spark), every=None) as meter:
            load(rate * seconds)
        time.sleep(stream.outputs[0].delivery.seconds + slack)
    ours.send("stop")
    latencies = sorted(ours.recv())
    consumer.join(timeout=60)
    query.stop()
    if not latencies:
        raise RuntimeError(f"{label}: no record of the measured load reached {topic}")
    return Result(
        f"latency, {label}, at {rate:,}/s",
        guarantee,
        p50_ms=latencies[len(latencies) // 2],
        p99_ms=latencies[int(len(latencies) * 0.99)],
        events=len(latencies),
        cpu_s_per_m_events=per_million(meter.seconds, rate * seconds),
    )


def share(results: list[Result]) -> tuple[float, list[float]]:
    """Exactly once's throughput over at least once's (of the medians), and of each round."""
    loose, strict = (next(r for r in results if r.guarantee == g) for g in GUARANTEES)
    assert loose.events_per_second and strict.events_per_second
    rounds = [s / a for s, a in zip(strict.rounds, loose.rounds, strict=True)]
    return strict.events_per_second / loose.events_per_second, rounds


def markdown(results: list[Result]) -> str:
    rows = "\n".join(
        f"| {r.name} | {cell(r.events_per_second, ',.0f')} | {cell(r.p50_ms, '.0f')} | "
        f"{cell(r.p99_ms, '.0f')} | {r.events:,} | {cell(r.cpu_s_per_m_events, '.1f')} |"
        for r in results
    )
    ratio, rounds = share(results[:2])

    def each(r: Result) -> str:
        return ", ".join(f"{rate:,.0f}" for rate in r.rounds)

    return (
        f"Command: `{COMMAND}`, {time.strftime('%Y-%m-%d')}; Kafka, Spark and the producer and "
        f"consumer on the same machine.\nMachine: {machine()}.\n"
        f"{CPU_COLUMN}: the CPU time of {CPU_COUNTS}.\n\n"
        f"| run | events/s | p50 ms | p99 ms | events | {CPU_COLUMN} |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: |\n"
        f"{rows}\n\nExactly once over at least once: {ratio:.2f} (medians of "
        f"{len(rounds)} interleaved rounds after a warm-up round; per round "
        f"{', '.join(f'{r:.2f}' for r in rounds)}; at least once {each(results[0])}, exactly "
        f"once {each(results[1])} events/s).\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=300_000, help="events for throughput")
    parser.add_argument("--rounds", type=int, default=3, help="throughput runs of each")
    parser.add_argument("--rate", type=int, default=5_000, help="events/s for latency")
    parser.add_argument("--seconds", type=int, default=30, help="seconds of latency load")
    args = parse_arguments(parser)
    settings = Settings()
    events, rounds, rate, seconds = args.events, args.rounds, args.rate, args.seconds
    warm_up, slack, triggers = WARM_UP_SECONDS, 5, ["1 second", "5 seconds"]
    if args.smoke:
        events, rounds, rate, seconds, warm_up, slack = 5_000, 1, 500, 3, 2, 2
        triggers = ["1 second"]
    slots = router_slots(spec("bench_sizing", "exactly_once", "1 second"))
    spark = spark_session(settings, "keystone-exactly-once-bench", slots=slots, quiet=True)
    leftovers = Leftovers()
    try:
        results = throughput(spark, settings, events, rounds, leftovers, warm_up=not args.smoke)
        for trigger in triggers:
            for guarantee in GUARANTEES:
                run = (rate, seconds, leftovers, warm_up, slack)
                results.append(latency(spark, settings, guarantee, trigger, *run))
    finally:
        spark.stop()
        leftovers.clean(settings)

    console.print(results_table(results))
    ratio, _ = share(results[:2])
    console.print(f"exactly once over at least once: {ratio:.2f}")
    figures = {
        "smoke": args.smoke,
        "cpu_counts": CPU_COUNTS,
        "topics": leftovers.topics,  # made, and deleted
        "ratio": ratio,
        "results": [asdict(r) for r in results],
    }
    save_figures(settings, "exactly_once", figures)
    if args.write_docs:
        write_section("exactly-once-bench", "Exactly once", markdown(results))
        console.print("wrote docs/benchmarks.md")


if __name__ == "__main__":
    main()
