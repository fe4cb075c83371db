"""The end-to-end benchmark: the demo stream (one output per sink type, and a Keystone route)
under a sustained load through the proxy, optionally with faults, every acknowledged guid
audited at every sink; `--write-docs` puts the figures and plots in docs/benchmarks.md.

    python -m keystone.loadtest.e2e_bench [--rate 1000] [--duration 300] [--fault kill-router ...]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from rich.console import Console

from keystone.contracts.settings import Settings
from keystone.control.client import ControlClient
from keystone.loadtest.bench import DOCS, write_section
from keystone.loadtest.demo import STREAM, provision
from keystone.loadtest.driver import Plan
from keystone.loadtest.faults import Fault
from keystone.loadtest.report import delivery_table, faults_table, ingest_table
from keystone.loadtest.run import Options, run

IMAGES = DOCS.parent / "img"
console = Console()


def markdown(figures: dict, command: str, images: str) -> str:
    plan = figures["plan"]
    return "\n".join(
        [
            f"Command: `{command}`: {plan['rate']:,.0f} events/s, {plan['event_size']} B on "
            f"average, for {plan['duration']:.0f} s through the proxy ({plan['producers']} "
            "producers) into "
            "the demo stream; the stack, its routers and the load on the same machine.  ",
            f"Machine: {figures['machine']}.",
            "",
            *ingest_table(figures),
            *delivery_table(figures),
            *(faults_table(figures) if figures["faults"] else []),
            f"![rates]({images}-rate.png)",
            "",
            f"![latency]({images}-latency.png)",
            "",
        ]
    )


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
    report = Path.cwd() / "build" / "bench" / args.name
    command = "python -m keystone.loadtest.e2e_bench " + " ".join(sys.argv[1:])
    options = Options(
        plan=Plan(STREAM, args.rate, args.duration, 1024, args.producers),
        faults=[Fault.parse(f, args.duration) for f in args.fault],
        report=report,
        drain_timeout=600,
        command=command,
    )
    figures = run(settings, options, console)
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
