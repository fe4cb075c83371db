"""The end-to-end benchmark: the demo stream (one output per sink type, and a Keystone route)
under a sustained load through the proxy, optionally with faults, every acknowledged guid
audited at every sink; `--write-docs` puts the figures and plots in docs/benchmarks.md.

    python -m keystone.loadtest.e2e_bench [--rate 1000] [--duration 300] [--fault kill-router ...]
                                          [--smoke]

Beside events/s, CPU seconds per million acknowledged events: the CPU time of the demo stream's
router (its process group: the router and its JVM, one started again by the fleet counted from
its start) and of the proxy's processes, over the whole run (the load, then the audit until
every sink holds every event, idle time included); Kafka, Elasticsearch, Hive, control and the
load generator are not counted. The demo streams are made if missing, and then deleted when the
run ends, with their topics (whether it ended well or not); streams that were there before stay.
`--smoke` sends 2,000 events in 5 s and writes its report under the state directory: it checks
that the benchmark runs, its figures mean nothing.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.control.client import ControlClient, ControlError
from keystone.control.launcher import Deployment
from keystone.loadtest.bench import (
    CPU_COLUMN,
    DOCS,
    CpuMeter,
    parse_arguments,
    per_million,
    process_tree,
    proxy_processes,
    save_figures,
    stream_topics,
    write_section,
)
from keystone.loadtest.demo import ALERTS, STREAM, provision
from keystone.loadtest.driver import Plan
from keystone.loadtest.faults import Fault
from keystone.loadtest.report import delivery_table, faults_table, ingest_table
from keystone.loadtest.run import Options, await_routers, run
from keystone.router.topics import all_topics, delete_topics
from keystone.terminal import console

IMAGES = DOCS.parent / "img"
CPU_COUNTS = (
    "the demo stream's router (its process group: the router and its JVM) and the proxy's "
    "processes, over the whole run (the load, then the audit until every sink holds every "
    "event); not Kafka, Elasticsearch, Hive, control or the load generator"
)
STREAMS = [STREAM, ALERTS]  # the demo stream first: it feeds the other
SMOKE = {"rate": 400.0, "duration": 5.0, "producers": 2, "drain_timeout": 180.0}
STOP_SECONDS = 120  # how long a deleted stream's router may take to stop


def router_processes(settings: Settings) -> Callable[[], list[int]]:
    """The demo streams' routers, as the fleet records them, with their descendants (the JVM)."""

    def pids() -> list[int]:
        roots = [d.pid for s in STREAMS if (d := Deployment.load(settings, s)) and d.alive()]
        return process_tree(*roots) if roots else []

    return pids


def cpu_figures(events: int, routers: CpuMeter, proxy: CpuMeter | None) -> dict[str, Any]:
    total = routers.seconds + (proxy.seconds if proxy is not None else 0.0)
    return {
        "cpu_s_per_m_events": per_million(total, events),
        "router_cpu_s_per_m_events": per_million(routers.seconds, events),
        "proxy_cpu_s_per_m_events": per_million(proxy.seconds, events) if proxy else None,
    }


# The settings that shape the embedded stack, beyond one of each (issue 33's cluster stack).
SHAPE = ("kafka_brokers", "spark_cluster", "spark_workers", "control_replicas", "fronting_clusters")


def stack_shape(settings: Settings) -> str:
    """The environment that gave the stack its shape, where it is not the default: a run's
    command says what it ran on."""
    fields = Settings.model_fields
    changed = [
        n for n in SHAPE if getattr(settings, n) != fields[n].get_default(call_default_factory=True)
    ]
    if "spark_cluster" not in changed:
        changed = [n for n in changed if n != "spark_workers"]  # no workers in local mode
    return "".join(f"KEYSTONE_{n.upper()}={_env_value(getattr(settings, n))} " for n in changed)


def _env_value(value: object) -> str:
    """As the environment gives it: a list comma-separated."""
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def markdown(figures: dict, command: str, images: str) -> str:
    plan = figures["plan"]
    cpu = figures["cpu"]

    def cell(value: float | None) -> str:
        return "" if value is None else f"{value:.1f}"

    return "\n".join(
        [
            f"Command: `{command}`: {plan['rate']:,.0f} events/s, {plan['event_size']} B on "
            f"average, for {plan['duration']:.0f} s through the proxy ({plan['producers']} "
            "producers) into "
            "the demo stream; the stack, its routers and the load on the same machine.  ",
            f"Machine: {figures['machine']}.",
            "",
            *ingest_table(figures),
            f"{CPU_COLUMN}: the CPU time of {CPU_COUNTS}, per million acknowledged events.",
            "",
            f"| {CPU_COLUMN} | of which the router | of which the proxy |",
            "| ---: | ---: | ---: |",
            f"| {cell(cpu['cpu_s_per_m_events'])} | {cell(cpu['router_cpu_s_per_m_events'])} "
            f"| {cell(cpu['proxy_cpu_s_per_m_events'])} |",
            "",
            *delivery_table(figures),
            *(faults_table(figures) if figures["faults"] else []),
            f"![rates]({images}-rate.png)",
            "",
            f"![latency]({images}-latency.png)",
            "",
        ]
    )


def remove_streams(
    settings: Settings, control: ControlClient, names: list[str], kept: set[str]
) -> list[str]:
    """Deletes the streams (in order: a stream before the one it feeds), waits for their
    routers to stop, then deletes their topics, which control keeps, but those in `kept` (there
    before the benchmark: a stream of that name deleted earlier keeps its data); returns the
    topics it deleted."""
    specs: list[StreamSpec] = []
    for name in names:
        try:
            specs.append(control.stream(name).spec)
            control.delete_stream(name)
        except ControlError as e:
            if e.status != 404:
                raise
    deadline = time.monotonic() + STOP_SECONDS
    while any((d := Deployment.load(settings, s.name)) and d.alive() for s in specs):
        if time.monotonic() > deadline:
            console.print("[yellow]the routers had not stopped: deleting their topics anyway[/]")
            break
        time.sleep(1)
    topics = [t for s in specs for t in stream_topics(s) if t not in kept]
    if topics:
        delete_topics(settings, topics)
        console.print(f"deleted the streams {', '.join(s.name for s in specs)} and their topics")
    return topics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=1000)
    parser.add_argument("--duration", type=float, default=300)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--fault", action="append", default=[], help="as keystone loadtest's")
    parser.add_argument("--name", default="e2e", help="the docs section and image names")
    args = parse_arguments(parser)
    settings = Settings()
    rate, duration, producers, drain_timeout = args.rate, args.duration, args.producers, 600.0
    report = Path.cwd() / "build" / "bench" / args.name
    if args.smoke:
        rate, duration = SMOKE["rate"], SMOKE["duration"]
        producers, drain_timeout = int(SMOKE["producers"]), SMOKE["drain_timeout"]
        report = settings.state_dir / "bench" / f"{args.name}-smoke"
    command = (
        stack_shape(settings) + "python -m keystone.loadtest.e2e_bench " + " ".join(sys.argv[1:])
    )
    options = Options(
        plan=Plan(STREAM, rate, duration, 1024, producers),
        faults=[Fault.parse(f, duration) for f in args.fault],
        report=report,
        drain_timeout=drain_timeout,
        command=command,
    )
    with ControlClient.from_settings(settings) as control:
        existing = {s.spec.name for s in control.streams()}
        made = [s for s in STREAMS if s not in existing]
        topics_before = set(all_topics(settings))
        try:
            provision(control, console)
            # The router's start-up is not the load's work: measured once it runs.
            await_routers(control, [STREAM], console)
            proxy = proxy_processes(settings)
            with (
                CpuMeter(router_processes(settings), every=5.0) as routers,
                CpuMeter(proxy or list, every=5.0) as proxy_meter,
            ):
                figures = run(settings, options, console)
        finally:
            topics = remove_streams(settings, control, made, topics_before)
    acknowledged = figures["ingest"]["acknowledged"]
    figures["cpu"] = cpu_figures(acknowledged, routers, proxy_meter if proxy else None)
    console.print(f"{CPU_COLUMN}: {figures['cpu']['cpu_s_per_m_events'] or 0:.1f} ({CPU_COUNTS})")
    result = {
        "name": args.name,
        "events": acknowledged,
        "events_per_second": figures["ingest"]["achieved_per_s"],
        **figures["cpu"],
        "lossless": figures["audit"]["lossless"],
        "drained": figures["audit"]["drained"],
    }
    summary = {
        "smoke": args.smoke,
        "cpu_counts": CPU_COUNTS,
        "report": str(report),
        "topics": topics,  # made, and deleted
        "results": [result],
    }
    save_figures(settings, args.name, summary)
    if args.write_docs:
        IMAGES.mkdir(exist_ok=True)
        for plot in ("rate", "latency"):
            shutil.copyfile(report / f"{plot}.png", IMAGES / f"{args.name}-{plot}.png")
        heading = "End to end" if not args.fault else "End to end, with faults"
        write_section(f"{args.name}-bench", heading, markdown(figures, command, f"img/{args.name}"))
        console.print("wrote docs/benchmarks.md")
    lossless = figures["audit"]["lossless"] and figures["audit"]["drained"]
    sys.exit(0 if lossless else 1)


if __name__ == "__main__":
    main()
