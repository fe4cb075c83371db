"""Benchmark of the router against its floor, on the running stack.

    python -m keystone.loadtest.router_bench [--events 500000] [--seconds 30] [--smoke]
                                             [--write-docs]

1. throughput: 1 KB events preloaded on a fronting topic, read from the start by
   (a) the router's own output query (micro-batch, Kafka sink, a filter keeping half, a
       projection of five fields), built by `router.job.Router` exactly as the router runs it;
   (b) a minimal hand-written Spark job doing the same work (from_json with a fixed schema,
       the filter, to_json of the five fields, the guid from the headers as key, the headers
       carried on): the floor.
   Both run in this one Spark application with the same batch size: a warm-up round, left out,
   then rounds in which they take turns going first; events/s is input rows over the time Spark
   spent in their batches, as query progress reports it, leaving out each query's first batch
   (start-up and code generation); the median of the rounds.
2. latency: a steady 5,000 events/s produced (from another process) to a fronting topic while a
   router output copies them to a sink topic, under Real-time Mode (at the default checkpoint
   interval, 60 s, over 180 s of load so that three checkpoints fall in it, and at 10 s) and in
   1-second micro-batches, each after 10 s of the same load to warm up; latency is the sink
   record's Kafka timestamp minus the event's ingest time (`ks_ts`), p50 and p99.

Beside events/s, CPU seconds per million events read: the CPU time of this Spark application (its
JVM and this Python process; not the producer's, another process for the latency runs), for a
throughput run from its query's start to its stop (the median of the rounds), for a latency run
over the measured load. Every topic the benchmark makes, and every checkpoint it writes, is
deleted when it ends, whether it ended well or not. `--smoke` reads 5,000 events in one round
(no warm-up) and runs each delivery mode for a few seconds: it checks that the benchmark runs,
its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import statistics
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from rich.progress import Progress
from rich.table import Table

from keystone import terminal
from keystone.contracts import envelope, kafka_clients
from keystone.contracts.names import fronting_topic, output_topic
from keystone.contracts.settings import Settings
from keystone.contracts.spec import DEFAULT_TRIGGERS, Delivery, StreamSpec, load_spec
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
from keystone.router.job import Router
from keystone.router.metrics import RouterMetrics
from keystone.router.plan import BATCH_LIMIT, router_slots
from keystone.router.spark import spark_session
from keystone.router.topics import create_topics, delete_topics, read_topic
from keystone.terminal import console

COMMAND = "python -m keystone.loadtest.router_bench --write-docs"
FILTER = "variant = 'a'"
PROJECTION = ["guid", "timestamp", "user.id as user_id", "device.type as device", "title"]
PARTITIONS = 6
WARM_UP_SECONDS = 10
CPU_COUNTS = (
    "this Spark application's processes (its JVM and this Python process; not the producer's), "
    "for throughput from each query's start to its stop (the median of the rounds), for latency "
    "over the measured load; per million events read"
)


@dataclass
class Result:
    name: str
    events_per_second: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    events: int = 0
    rounds: list[float] = field(default_factory=list)  # events/s of each throughput round
    cpu_s_per_m_events: float | None = None  # see CPU_COUNTS


@dataclass
class Leftovers:
    """What a run makes outside this process, all of it removed when it ends."""

    topics: list[str] = field(default_factory=list)
    folders: list[Path] = field(default_factory=list)  # checkpoints

    def clean(self, settings: Settings) -> None:
        for folder in self.folders:
            shutil.rmtree(folder, ignore_errors=True)
        if self.topics:
            delete_topics(settings, self.topics)
            console.print(f"deleted the topics {', '.join(self.topics)}")


def handwritten_topic(stream: str) -> str:
    return f"{stream}.handwritten"


def spec(name: str, mode: str, trigger: str) -> StreamSpec:
    return load_spec(
        {
            "name": name,
            "owner": "bench",
            "partitions": PARTITIONS,
            # The routing alone, as the hand-written job does it (and the history measured).
            "archive": {"enabled": False},
            "outputs": [
                {
                    "name": "out",
                    "filter": FILTER,
                    "projection": PROJECTION,
                    "sink": {"type": "kafka"},
                    "delivery": {"mode": mode, "trigger": trigger},
                    "start": "earliest",
                }
            ],
        }
    )


def handwritten(
    spark: SparkSession, settings: Settings, stream: str, checkpoint: str
) -> StreamingQuery:
    """The same work written by hand, with a fixed schema instead of the filter language."""
    source = (
        spark.readStream.format("kafka")
        .options(**kafka_clients.spark_options(settings))
        .option("subscribe", fronting_topic(stream))
        .option("includeHeaders", "true")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", BATCH_LIMIT)
        .load()
    )
    return (
        handwritten_records(source)
        .writeStream.format("kafka")
        .options(**kafka_clients.spark_options(settings))
        .option("topic", handwritten_topic(stream))
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="1 second")
        .start()
    )


def handwritten_records(source: DataFrame) -> DataFrame:
    """The hand-written job's records from Kafka source columns (`value`, `headers`)."""
    fields = "variant STRING, user STRUCT<id: BIGINT>, device STRUCT<type: STRING>, title STRING"
    event = F.from_json(F.col("value").cast("string"), fields)
    # A map of the headers, reversed: with this policy the first of a repeated header wins, as
    # the router reads it (router.source.first_headers); Spark's default refuses the record.
    source.sparkSession.conf.set("spark.sql.mapKeyDedupPolicy", "LAST_WIN")
    meta = F.map_from_entries(F.reverse("headers"))
    out = source.select(
        event.alias("e"),
        "headers",
        meta[envelope.GUID].cast("string").alias("guid"),
        meta[envelope.TIMESTAMP].cast("string").cast("long").alias("timestamp"),
    )
    return out.where(F.col("e.variant") == "a").select(
        F.col("guid").cast("binary").alias("key"),
        F.to_json(
            F.struct(
                "guid",
                "timestamp",
                F.col("e.user.id").alias("user_id"),
                F.col("e.device.type").alias("device"),
                F.col("e.title").alias("title"),
            )
        ).alias("value"),
        "headers",  # carried on, as the router's Kafka sink does
    )


def rate_of(query: StreamingQuery, events: int, progress: Progress, label: str) -> float:
    """Waits until the query has read `events` rows; their rows over Spark's time in batches."""
    task = progress.add_task(label, total=events)
    seen: dict[int, dict] = {}
    while sum(p["numInputRows"] for p in seen.values()) < events:
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        for p in query.recentProgress:
            seen[p["batchId"]] = p
        progress.update(task, completed=sum(p["numInputRows"] for p in seen.values()))
        time.sleep(0.5)
    query.stop()
    # The first batch also compiles the query's code: steady state is what is compared (but
    # when the first batch read everything, as in a smoke run, it is all there is).
    read = [p for p in seen.values() if p["numInputRows"]]
    batches = [p for p in read if p["batchId"] > 0] or read
    busy = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    return sum(p["numInputRows"] for p in batches) / busy


def throughput(
    spark: SparkSession,
    settings: Settings,
    events: int,
    rounds: int,
    leftovers: Leftovers,
    warm_up: bool = True,
) -> list[Result]:
    name = f"bench_tp_{uuid.uuid4().hex[:6]}"
    stream = spec(name, "microbatch", "1 second")
    leftovers.topics += [*stream_topics(stream), handwritten_topic(name)]
    ensure_topics(settings, stream)
    # The broker creates no topic on its own: the router's is made as it starts, this one here.
    create_topics(settings, {handwritten_topic(name): PARTITIONS})
    with console.status(f"producing {events:,} events of 1 KB…"):
        produce(settings, fronting_topic(name), events, stream=name)
    rates: dict[str, list[float]] = {"router": [], "hand-written": []}
    cpu: dict[str, list[float]] = {"router": [], "hand-written": []}
    processes = spark_processes(spark)
    with Progress(console=console) as progress:
        # Round 0 warms the JVM (the JIT compiles the Kafka client's and the JSON parser's code
        # on whichever job runs first) and is left out; then the two take turns going first.
        for round_ in range(0 if warm_up else 1, rounds + 1):
            # A fresh state folder, so fresh checkpoints: each round reads the whole topic.
            fresh = settings.model_copy(
                update={"state_dir": settings.state_dir / "bench" / uuid.uuid4().hex}
            )
            leftovers.folders.append(fresh.state_dir)
            order = ("router", "hand-written") if round_ % 2 else ("hand-written", "router")
            for job in order:
                with CpuMeter(processes, every=None) as meter:
                    if job == "router":
                        query = Router(spark, fresh, stream, RouterMetrics(name)).start_output(
                            stream.outputs[0]
                        )
                    else:
                        query = handwritten(spark, settings, name, str(fresh.checkpoints_dir / job))
                    label = f"{job}, " + (f"round {round_}" if round_ else "warm-up")
                    rate = rate_of(query, events, progress, label)
                if round_:
                    rates[job].append(rate)
                    cpu[job].append(meter.seconds)
    return [
        Result(
            label,
            statistics.median(rates[job]),
            events=events,
            rounds=rates[job],
            cpu_s_per_m_events=per_million(statistics.median(cpu[job]), events),
        )
        for job, label in (
            ("router", "router, micro-batch: filter ½, 5 fields"),
            ("hand-written", "hand-written Spark job, same work"),
        )
    ]


def latency(
    spark: SparkSession,
    settings: Settings,
    mode: str,
    trigger: str,
    rate: int,
    seconds: int,
    leftovers: Leftovers,
    warm_up: int = WARM_UP_SECONDS,
    slack: int = 10,
) -> Result:
    """`slack`: seconds waited past the trigger interval for the last events to arrive."""
    name = f"bench_lat_{uuid.uuid4().hex[:6]}"
    stream = spec(name, mode, trigger)
    leftovers.topics += stream_topics(stream)
    leftovers.folders.append(settings.checkpoints_dir / name)
    ensure_topics(settings, stream)
    create_topics(settings, {output_topic(name, "out"): PARTITIONS})
    job = Router(spark, settings, stream, RouterMetrics(name))
    query = job.start_output(stream.outputs[0])
    with console.status(f"{mode}: waiting for the query to run…"):
        while not query.recentProgress and query.isActive:
            time.sleep(0.5)
        time.sleep(5)  # past the first batch's start-up

    def load(events: int) -> None:
        # Its own process: in this one, it would share the GIL with Spark's callbacks.
        producer = multiprocessing.get_context("spawn").Process(
            target=produce, args=(settings, fronting_topic(name), events, rate, name)
        )
        producer.start()
        producer.join()
        assert producer.exitcode == 0, "the producer failed"

    with console.status(f"{mode}: warming up, {rate:,} events/s for {warm_up} s…"):
        # The first events through a new query meet cold code (the JIT, the sink's producer
        # learning the topic): steady state is measured after them.
        load(rate * warm_up)
    measured_from = int(time.time() * 1000)
    with console.status(f"{mode}: {rate:,} events/s for {seconds} s…"):
        with CpuMeter(spark_processes(spark), every=None) as meter:
            load(rate * seconds)
        time.sleep(Delivery(mode=mode, trigger=trigger).seconds + slack)  # the last epoch commits
    query.stop()
    latencies = []
    for message in read_topic(kafka_clients.librdkafka(settings), output_topic(name, "out")):
        record = json.loads(message.value())
        if record["timestamp"] >= measured_from:
            latencies.append(message.timestamp()[1] - record["timestamp"])
    if not latencies:
        raise RuntimeError(f"{mode}: no record of the measured load reached {name}'s sink")
    latencies.sort()
    return Result(
        f"latency, {mode} (trigger {trigger}) at {rate:,}/s",
        p50_ms=latencies[len(latencies) // 2],
        p99_ms=latencies[int(len(latencies) * 0.99)],
        events=len(latencies),
        cpu_s_per_m_events=per_million(meter.seconds, rate * seconds),
    )


def cell(value: float | None, form: str) -> str:
    return "" if value is None else format(value, form)


def results_table(results: Sequence[Any]) -> Table:
    """Runs (of this benchmark or another: name, events_per_second, p50_ms, p99_ms, events,
    cpu_s_per_m_events) as a terminal table."""
    table = terminal.table("run", "events/s", "p50 ms", "p99 ms", "events", CPU_COLUMN)
    for r in results:
        table.add_row(
            r.name,
            cell(r.events_per_second, ",.0f"),
            cell(r.p50_ms, ".0f"),
            cell(r.p99_ms, ".0f"),
            f"{r.events:,}",
            cell(r.cpu_s_per_m_events, ".1f"),
        )
    return table


def markdown(results: list[Result]) -> str:
    rows = "\n".join(
        f"| {r.name} | {cell(r.events_per_second, ',.0f')} | {cell(r.p50_ms, '.0f')} | "
        f"{cell(r.p99_ms, '.0f')} | {r.events:,} | {cell(r.cpu_s_per_m_events, '.1f')} |"
        for r in results
    )
    share = results[0].events_per_second / results[1].events_per_second

    def each(result: Result) -> str:
        return ", ".join(f"{rate:,.0f}" for rate in result.rounds)

    return (
        f"Command: `{COMMAND}`, {time.strftime('%Y-%m-%d')}; Kafka, Spark (`local[8]`) and the "
        f"producer on the same machine.\nMachine: {machine()}.\n"
        f"{CPU_COLUMN}: the CPU time of {CPU_COUNTS}.\n\n"
        f"| run | events/s | p50 ms | p99 ms | events | {CPU_COLUMN} |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: |\n"
        f"{rows}\n\nRouter over hand-written: {share:.2f} (medians of {len(results[0].rounds)} "
        f"rounds after a warm-up round; router {each(results[0])}; hand-written "
        f"{each(results[1])} events/s).\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=500_000, help="events for throughput")
    parser.add_argument("--rounds", type=int, default=3, help="throughput runs of each job")
    parser.add_argument("--rate", type=int, default=5_000, help="events/s for latency")
    parser.add_argument("--seconds", type=int, default=30, help="seconds of latency load")
    args = parse_arguments(parser)
    settings = Settings()
    # Each checkpoint pauses the output for a moment: the default interval over three of them,
    # and a short interval, whose more frequent pauses make the tail. A smoke run takes each
    # mode once, for a few seconds.
    runs = [
        ("realtime", DEFAULT_TRIGGERS["realtime"], 180),
        ("realtime", "10 seconds", args.seconds),
        ("microbatch", "1 second", args.seconds),
    ]
    events, rounds, rate, warm_up, slack = args.events, args.rounds, args.rate, WARM_UP_SECONDS, 10
    if args.smoke:
        runs = [("realtime", "5 seconds", 3), ("microbatch", "1 second", 3)]
        events, rounds, rate, warm_up, slack = 5_000, 1, 500, 2, 3
    slots = router_slots(spec("bench_sizing", "realtime", "10 seconds"))
    spark = spark_session(settings, "keystone-router-bench", slots=slots, quiet=True)
    leftovers = Leftovers()
    try:
        results = throughput(spark, settings, events, rounds, leftovers, warm_up=not args.smoke)
        for mode, trigger, seconds in runs:
            results.append(
                latency(spark, settings, mode, trigger, rate, seconds, leftovers, warm_up, slack)
            )
    finally:
        spark.stop()
        leftovers.clean(settings)

    console.print(results_table(results))
    console.print(f"{CPU_COLUMN}: {CPU_COUNTS}.")
    figures = {
        "smoke": args.smoke,
        "cpu_counts": CPU_COUNTS,
        "topics": leftovers.topics,  # made, and deleted
        "results": [asdict(r) for r in results],
    }
    save_figures(settings, "router", figures)
    if args.write_docs:
        write_section("router-bench", "Router", markdown(results))
        console.print("wrote docs/benchmarks.md")


if __name__ == "__main__":
    main()
