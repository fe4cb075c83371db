"""The end-to-end benchmark: the demo stream (one output per sink type, and a Keystone route)
under a sustained load through the proxy, optionally with faults, every acknowledged guid
audited at every sink; `--write-docs` puts the figures and plots in docs/benchmarks.md.

    python -m loadtest.e2e_bench [--rate 1000] [--duration 300] [--fault kill-router ...]
"""

from __future__ import annotations

import argparse
import shutil
import sys

from rich.console import Console

from contracts.settings import CHECKOUT, Settings
from control.client import ControlClient
from loadtest.bench import DOCS, write_section
from loadtest.demo import STREAM, provision
from loadtest.driver import Plan
from loadtest.faults import Fault
from loadtest.run import Options, run

IMAGES = DOCS.parent / "img"
console = Console()


def markdown(figures: dict, command: str, images: str) -> str:
    ingest, audit = figures["ingest"], figures["audit"]
    plan = figures["plan"]
    lines = [
        f"Command: `{command}`, {plan['rate']:,.0f} events/s of {plan['event_size']} B for "
        f"{plan['duration']:.0f} s through the proxy ({plan['producers']} producers); the stack, "
        "the router and the load on the same machine.  ",
        f"Machine: {figures['machine']}.",
        "",
        f"Ingest: {ingest['acknowledged']:,} of {ingest['attempted']:,} events acknowledged "
        f"({ingest['achieved_per_s']:,}/s), {ingest['abandoned']:,} never, "
        f"{ingest['rejected']:,} refused; request p50 {ingest['request_p50_ms']} ms, p99 "
        f"{ingest['request_p99_ms']} ms; acknowledged but missing from the fronting topic: "
        f"{audit['missing_at_ingest']:,}. Drained {audit['waited_seconds']} s after the load"
        + ("." if audit["drained"] else " (**not drained**)."),
        "",
        "| output | sink | expected | delivered | lost | duplicates | delivery rate "
        "| latency p50 s | latency p99 s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    latency = figures["sinks"].get("outputs", {})
    for o in audit["outputs"]:
        own = latency.get(o["output"], {})
        p50, p99 = own.get("run_p50_s"), own.get("run_p99_s")
        lines.append(
            f"| {o['output']} | {o['sink']} | {o['expected']:,} | {o['delivered']:,} "
            f"| {o['lost']:,} | {o['duplicates']:,} | {o['delivery_rate']:.6f} "
            f"| {'-' if p50 is None else f'{p50:.2f}'} | {'-' if p99 is None else f'{p99:.2f}'} |"
        )
    if figures["faults"]:
        lines += ["", "| fault | at s | back at s | what happened |", "| --- | ---: | ---: | --- |"]
        for f in figures["faults"]:
            lines.append(
                f"| {f['fault']} | {f.get('began_s', '')} | {f.get('ended_s', '')} "
                f"| {'; '.join(f['notes'])} |"
            )
    lines += ["", f"![rates]({images}-rate.png)", "", f"![latency]({images}-latency.png)", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=1000)
    parser.add_argument("--duration", type=float, default=300)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--fault", action="append", default=[], help="as keystone loadtest's")
    parser.add_argument("--name", default="e2e", help="the docs section and image names")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    settings = Settings()
    with ControlClient.from_settings(settings) as control:
        provision(control, console)
    report = CHECKOUT / "build" / "bench" / args.name
    options = Options(
        plan=Plan(STREAM, args.rate, args.duration, 1024, args.producers),
        faults=[Fault.parse(f, args.duration) for f in args.fault],
        report=report,
        drain_timeout=600,
    )
    figures = run(settings, options, console)
    if args.write_docs:
        IMAGES.mkdir(exist_ok=True)
        for plot in ("rate", "latency"):
            shutil.copyfile(report / f"{plot}.png", IMAGES / f"{args.name}-{plot}.png")
        command = "python -m loadtest.e2e_bench " + " ".join(sys.argv[1:])
        heading = "End to end" if not args.fault else "End to end, with faults"
        write_section(f"{args.name}-bench", heading, markdown(figures, command, f"img/{args.name}"))
        console.print("wrote docs/benchmarks.md")
    lossless = figures["audit"]["lossless"] and figures["audit"]["drained"]
    sys.exit(0 if lossless else 1)


if __name__ == "__main__":
    main()
