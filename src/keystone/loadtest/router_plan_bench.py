"""The router's per-event plan against the hand-written job's, without Kafka in the way.

    python -m keystone.loadtest.router_plan_bench [--events 400000] [--rounds 7] [--object-fields N]
                                         [--hygiene] [--jfr FILE] [--smoke] [--write-docs]

Both plans of `loadtest.router_bench` (the router's output query as `router.job.routed` builds
it, and the hand-written job) run over the same cached batch of 1 KB events with the proxy's
headers, into Spark's noop sink, in one task thread, taking turns. Each run is charged the CPU
time of the Spark application (its JVM and this Python process, which only waits for it),
steadier than wall time on a shared VM (other processes' load and the hypervisor's steal do not
count); the minimum over the rounds is the plan's cost, also given per million events. Needs no
stack, and makes no topic. `--smoke` runs every plan (the router's, the hand-written job's and,
as `--hygiene` does, the router's with hygiene) over 5,000 events in one round (after the round
that compiles them): it checks that the benchmark runs, its figures mean nothing. `--jfr`
records the whole run with Java Flight Recorder (`jfr print --events jdk.ExecutionSample FILE`
shows where the router's CPU goes). `--object-fields N` gives the event's two objects N more
fields each, which neither plan reads (`loadtest.bench.make_event`). `--hygiene` compares the
router's plan with itself instead: its projection of five fields, then the same five with two
hashed and one masked (`HYGIENE`), the cost of data hygiene per event.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from rich.progress import Progress

from keystone import terminal
from keystone.contracts import envelope
from keystone.contracts.settings import Settings
from keystone.contracts.spec import OutputSpec
from keystone.loadtest.bench import (
    CPU_COLUMN,
    CpuMeter,
    machine,
    make_event,
    parse_arguments,
    per_million,
    save_figures,
    spark_processes,
    write_section,
)
from keystone.loadtest.router_bench import handwritten_records, spec
from keystone.router.job import paths_read_by, routed
from keystone.router.meter import Meter
from keystone.router.sinks.kafka.writer import KafkaWriter
from keystone.router.sinks.route import Route
from keystone.router.source import envelope as source_columns
from keystone.router.spark import spark_session
from keystone.terminal import console

COMMAND = "python -m keystone.loadtest.router_plan_bench --write-docs"
DISTINCT = 20_000  # distinct events, repeated to make up the batch
CPU_COUNTS = "this Spark application's processes (its JVM and this Python process)"
SMOKE_EVENTS = 5_000
# The benchmark's projection (router_bench.PROJECTION) with two fields hashed and one masked.
HYGIENE = [
    "guid",
    "timestamp",
    "hash(user.id) as user_id",
    "mask(device.type, 1) as device",
    "hash(title) as title",
]
BENCH_KEY = b"the benchmark stream's key"


def cached_events(
    spark: SparkSession, events: int, object_fields: int = 0
) -> tuple[DataFrame, int]:
    """About `events` fronting records (the Kafka source's columns) held in memory, and how many
    there are."""
    common = envelope.common_headers(int(time.time() * 1000), "bench", "bench", "bench")
    stamped, distinct = [], min(DISTINCT, events)
    for seq in range(distinct):
        guid = str(uuid.uuid4()).encode()
        stamped.append((guid, make_event(seq, object_fields), envelope.event_headers(guid, common)))
    rows = spark.createDataFrame(
        stamped, "key binary, value binary, headers array<struct<key:string,value:binary>>"
    )
    repeats = spark.range(max(1, events // distinct)).withColumnRenamed("id", "offset")
    batch = rows.crossJoin(repeats).select(
        "key",
        "value",
        "headers",
        F.lit("bench").alias("topic"),
        F.lit(0).alias("partition"),
        "offset",
    )
    batch = batch.repartition(2).cache()
    return batch, batch.count()


def cost(spark: SparkSession, plan: Callable[[], DataFrame]) -> tuple[float, float]:
    """CPU and wall seconds of one run of the plan into the noop sink."""
    frame = plan()
    with CpuMeter(spark_processes(spark), every=None) as meter:
        wall = time.perf_counter()
        frame.write.format("noop").mode("overwrite").save()
        wall = time.perf_counter() - wall
    return meter.seconds, wall


def at_least(minimum: int) -> Callable[[str], int]:
    def whole(text: str) -> int:
        if not text.isdigit() or int(text) < minimum:
            raise argparse.ArgumentTypeError(f"a whole number from {minimum}, not {text!r}")
        return int(text)

    return whole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=at_least(1), default=400_000)
    parser.add_argument("--rounds", type=at_least(1), default=7)
    parser.add_argument("--object-fields", type=at_least(0), default=0, metavar="N")
    parser.add_argument(
        "--hygiene", action="store_true", help="the router plain against the router with hygiene"
    )
    parser.add_argument("--jfr", help="record the run with Java Flight Recorder into this file")
    args = parse_arguments(parser)
    if args.smoke:
        args.events, args.rounds = SMOKE_EVENTS, 1
    if args.jfr and any(c.isspace() for c in args.jfr):
        # Spark's launcher scripts split Java options on spaces, quoted or not.
        parser.error(f"--jfr: a path without spaces, not {args.jfr!r}")
    # Set before the JVM starts: the cached batch must fit in memory, or it is read from disk.
    options = "--driver-memory 4g"
    if args.jfr:
        options += f" --driver-java-options -XX:StartFlightRecording=filename={args.jfr}"
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"{options} pyspark-shell"
    settings = Settings()
    spark = spark_session(settings, "keystone-router-plan-bench", "local[1]", quiet=True)
    # As in a streaming query, which never plans adaptively.
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    with console.status(f"caching {args.events:,} events…"):
        batch, events = cached_events(spark, args.events, args.object_fields)
    stream = spec("bench", "microbatch", "1 second")
    output = stream.outputs[0]
    meter = Meter(spark, "bench.out")
    sink = KafkaWriter(Route(settings, stream, output), meter)

    def router(routing: OutputSpec) -> Callable[[], DataFrame]:
        source = source_columns(batch, None, paths_read_by([routing]))
        return lambda: sink.frame(routed(source, routing, meter, key=BENCH_KEY))

    plans: dict[str, Callable[[], DataFrame]] = {"router": router(output)}
    if not args.hygiene or args.smoke:  # a smoke run takes every plan, once
        plans["hand-written"] = lambda: handwritten_records(batch)
    if args.hygiene or args.smoke:
        plans["router, hygiene"] = router(output.model_copy(update={"projection": HYGIENE}))
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in plans}
    with Progress(console=console) as progress:
        task = progress.add_task("rounds", total=args.rounds + 1)
        for round_ in range(args.rounds + 1):  # round 0 compiles both plans: left out
            for name in plans if round_ % 2 else reversed(plans):
                measured = cost(spark, plans[name])
                if round_:
                    runs[name].append(measured)
            progress.advance(task)
    spark.stop()

    rows = {name: (min(c for c, _ in r), min(w for _, w in r)) for name, r in runs.items()}
    table = terminal.table("plan", "CPU s (min)", "wall s (min)", "events per CPU s", CPU_COLUMN)
    for name, (cpu, wall) in rows.items():
        table.add_row(
            name, f"{cpu:.2f}", f"{wall:.2f}", f"{events / cpu:,.0f}", _per_million(cpu, events)
        )
    console.print(table)
    console.print(f"CPU: {CPU_COUNTS}.")
    # Hygiene's CPU over the plain plan's; the hand-written job's over the router's.
    other = "router, hygiene" if args.hygiene else "hand-written"
    compared = "Hygiene over plain" if args.hygiene else "Router over hand-written"
    share = rows[other][0] / rows["router"][0]
    console.print(f"{compared}, by CPU: {share:.2f}")
    suffix = "-hygiene" if args.hygiene else "-object-fields" if args.object_fields else ""
    marker = "router-plan-bench" + suffix
    stem = "router_plan" + suffix.replace("-", "_")
    figures = {
        "smoke": args.smoke,
        "object_fields": args.object_fields,
        "cpu_counts": CPU_COUNTS,
        "topics": [],  # it makes none
        "results": [
            {
                "name": name,
                "events": events,
                "cpu_s": cpu,
                "wall_s": wall,
                "events_per_second": events / wall,
                "events_per_cpu_second": events / cpu,
                "cpu_s_per_m_events": per_million(cpu, events),
            }
            for name, (cpu, wall) in rows.items()
        ],
    }
    save_figures(settings, stem, figures)
    if args.write_docs:
        write_section(marker, "Router", markdown(args, events, rows, f"{compared}: {share:.2f}"))
        console.print("wrote docs/benchmarks.md")


def _per_million(cpu: float, events: int) -> str:
    return f"{cpu / events * 1_000_000:.2f}"


def markdown(
    args: argparse.Namespace, events: int, rows: dict[str, tuple[float, float]], share: str
) -> str:
    lines = "\n".join(
        f"| {name} | {cpu:.2f} | {wall:.2f} | {events / cpu:,.0f} | {_per_million(cpu, events)} |"
        for name, (cpu, wall) in rows.items()
    )
    command = COMMAND + (f" --object-fields {args.object_fields}" if args.object_fields else "")
    command += " --hygiene" if args.hygiene else ""
    size = len(make_event(0, args.object_fields))
    return (
        f"Command: `{command}`, {time.strftime('%Y-%m-%d')}: {events:,} cached events "
        f"of {size:,} B, "
        f"one task thread, minimum of {args.rounds} rounds; no stack.\nMachine: {machine()}.\n"
        f"CPU: the CPU time of {CPU_COUNTS} over each run of a plan.\n\n"
        f"| plan | CPU s | wall s | events per CPU s | {CPU_COLUMN} |\n"
        "| --- | ---: | ---: | ---: | ---: |\n"
        f"{lines}\n\n{share} (by CPU).\n"
    )


if __name__ == "__main__":
    main()
