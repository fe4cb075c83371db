"""What a shadow costs the live output: its delivery latency and its router's CPU with a shadow
running beside it, against the same router without, in one run on the running stack (issue 47).

    python -m keystone.loadtest.shadow_bench [--rates 1000,5000] [--settle 60] [--warm-up 20]
        [--seconds 130] [--rounds 3] [--smoke] [--write-docs]

Two streams made through control as the deployed benchmark's (`loadtest.deployed_bench`: one
realtime Kafka output, a filter keeping half, five fields projected, 4 partitions), one of them
with a shadow of its output (a field renamed, one hashed: every kept event differs) reading as
fast as the stream is fed. Both run for the whole benchmark and are fed in turns, the one going
first alternating by round; each phase measures the live output's latency (its records' broker
append time minus `ks_ts`) and the router's whole process tree's CPU, shadow included. Ratios:
with the shadow over without, the medians of the rounds.

`--smoke` runs both at 500 events/s for a few seconds: it checks that the benchmark runs, its
figures mean nothing.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict

from keystone.contracts.settings import Settings
from keystone.loadtest.bench import machine, parse_arguments, save_figures, write_section
from keystone.loadtest.deployed_bench import (
    CHECKPOINT,
    Phase,
    phase,
    phases_table,
    router_target,
    send,
    table_head,
)
from keystone.loadtest.router_bench import PROJECTION
from keystone.terminal import console

COMMAND = "python -m keystone.loadtest.shadow_bench --write-docs"
# The shadow's version of the output: the user's id renamed, the device hashed.
SHADOW = {
    "projection": [
        *(p for p in PROJECTION if not p.startswith(("user.id", "device.type"))),
        "user.id as uid",
        "hash(device.type) as device",
    ]
}
PLAIN, SHADOWED = "router", "router with a shadow"


def median_of(phases: list[Phase], target: str, rate: int, field: str) -> float | None:
    values = [getattr(p, field) for p in phases if p.target == target and p.rate == rate]
    return statistics.median(values) if values else None


def ratios(phases: list[Phase]) -> dict[int, dict[str, float]]:
    """Per rate, with the shadow over without: p50, p99 and CPU per event (medians)."""
    found: dict[int, dict[str, float]] = {}
    for rate in sorted({p.rate for p in phases}):
        found[rate] = {}
        for key, field in (("p50", "p50_ms"), ("p99", "p99_ms"), ("cpu", "cpu_s_per_m_events")):
            plain = median_of(phases, PLAIN, rate, field)
            shadowed = median_of(phases, SHADOWED, rate, field)
            if plain and shadowed is not None:
                found[rate][key] = shadowed / plain
    return found


def markdown(phases: list[Phase], args: argparse.Namespace) -> str:
    rates = sorted({p.rate for p in phases})
    found = ratios(phases)

    def cell(target: str, rate: int, field: str) -> str:
        value = median_of(phases, target, rate, field)
        return "" if value is None else f"{value:.0f}"

    rows = [
        f"| {rate:,} events/s | "
        + " | ".join(
            f"{cell(t, rate, 'p50_ms')} / {cell(t, rate, 'p99_ms')}" for t in (PLAIN, SHADOWED)
        )
        + f" | {found[rate].get('p99', 0):.2f} | "
        + " | ".join(cell(t, rate, "cpu_s_per_m_events") for t in (PLAIN, SHADOWED))
        + f" | {found[rate].get('cpu', 0):.2f} |"
        for rate in rates
    ]
    spread = "; ".join(
        f"{p.target} at {p.rate:,}/s round {p.round}: p99 {p.p99_ms:.0f} ms, "
        f"{p.cpu_s_per_m_events or 0:.0f} CPU s per M events"
        for p in phases
    )
    missing, copies = sum(p.missing for p in phases), sum(p.copies for p in phases)
    return (
        f"Command: `{COMMAND}` (rates {args.rates}, settled {args.settle} s, {args.warm_up} s "
        f"of warm-up, {args.seconds} s measured, {args.rounds} rounds, turns alternating), "
        f"{time.strftime('%Y-%m-%d')}; Kafka, both routers and the producer on the same "
        f"machine.\nMachine: {machine()}.\n\n"
        "Two routers as control deploys them, the deployed benchmark's stream (one realtime "
        f"Kafka output, checkpoints every {CHECKPOINT:.0f} s); the second with a shadow of its "
        "output (a field renamed, one hashed) reading every event as it comes. Latency: the "
        "live output's records' broker append time minus `ks_ts`; CPU: each router's whole "
        "process tree, its shadow's query included. Medians of the rounds.\n\n"
        + table_head(
            [
                "load",
                "live p50 / p99 ms",
                "live p50 / p99 ms, shadow beside",
                "p99 with / without",
                "CPU s per M events",
                "CPU s per M events, shadow beside",
                "CPU with / without",
            ]
        )
        + "\n".join(rows)
        + f"\n\nMeasured events missing from the live output: {missing}; written twice: "
        f"{copies}.\n\nEach phase: {spread}.\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="1000,5000", help="loads, events/s, comma-separated")
    parser.add_argument("--settle", type=int, default=60, help="seconds each router first gets")
    parser.add_argument("--warm-up", type=int, default=20, help="seconds before each phase")
    parser.add_argument(
        "--seconds", type=int, default=int(2 * CHECKPOINT + 10), help="seconds measured"
    )
    parser.add_argument("--rounds", type=int, default=3, help="measured phases of each router")
    args = parse_arguments(parser)
    if args.smoke:
        args.rates, args.settle, args.warm_up, args.seconds, args.rounds = "500", 0, 2, 3, 1
    rates = [int(r) for r in args.rates.split(",") if r]
    settings = Settings()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # what it made goes, as on Ctrl-C
    topics: list[str] = []
    phases: list[Phase] = []
    with ExitStack() as running:
        targets = [
            running.enter_context(router_target(settings, max(rates), topics)),
            running.enter_context(
                router_target(settings, max(rates), topics, shadow=SHADOW, target=SHADOWED)
            ),
        ]
        for target in targets:
            with console.status(f"{target.name}: settling for {args.settle} s…"):
                send(settings, target.source, min(rates) * args.settle, min(rates))
        for round_ in range(1, args.rounds + 1):
            for rate in rates:
                first = round_ % 2
                for target in targets[first:] + targets[:first]:
                    phases.append(phase(settings, target, rate, round_, args.warm_up, args.seconds))
                    console.print(phases_table(phases[-1:]))
    console.print(phases_table(phases))
    for rate, ratio in ratios(phases).items():
        said = ", ".join(f"{key} {value:.2f}" for key, value in ratio.items())
        console.print(f"{rate:,} events/s, with a shadow over without: {said}")
    save_figures(
        settings,
        "shadow",
        {
            "smoke": args.smoke,
            "topics": topics,
            "phases": [asdict(p) for p in phases],
            "ratios": ratios(phases),
        },
    )
    if args.write_docs:
        write_section("shadow-bench", "A shadow beside the live output", markdown(phases, args))
        console.print("wrote docs/benchmarks.md")


if __name__ == "__main__":
    main()
