"""What Kafka's TLS and SASL cost the proxy and the router, measured on the embedded stack each
way in turn, in one run (issue 44).

    python -m keystone.loadtest.security_bench [--rounds 2] [--rate 5000] [--seconds 60]
        [--settle 60] [--smoke] [--write-docs]

No stack may be running: each round starts the embedded stack with its Kafka in plaintext and
then secured (`kafka_security` sasl_ssl; which goes first alternates by round), each in a state
directory of its own kept across rounds and deleted at the end, and on each, in turn:

1. the proxy: `--seconds` of batch-100 requests posted open-loop at `--rate` events per second
   (`proxy_bench.steady`), its processes metered (CPU per million events; latency from each
   request's scheduled send);
2. the router as control deploys it, with one realtime Kafka output (`deployed_bench`'s
   stream), settled for `--settle` seconds, then fed `--rate` events per second for `--seconds`
   while its process tree is metered (CPU per million events; delivery latency from each
   output record's broker append time).

The figures are each mode's median over the rounds and the secured one's ratio to the
plaintext one per round (their spread). `--smoke` runs one round of a few seconds at 500 events/s:
it checks that the benchmark runs, its figures mean nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.table import Table

from keystone import terminal
from keystone.contracts.settings import Settings
from keystone.loadtest import deployed_bench, proxy_bench
from keystone.loadtest.bench import (
    CPU_COLUMN,
    CpuMeter,
    machine,
    parse_arguments,
    per_million,
    proxy_processes,
    save_figures,
    write_section,
)
from keystone.terminal import console

COMMAND = "python -m keystone.loadtest.security_bench --write-docs"
MODES = ("plaintext", "sasl_ssl")
BATCH = 100  # events per proxy request, as producers batch them
STACK_SECONDS = 600.0  # for `keystone stack up` on a fresh state directory (first: PostgreSQL)


@dataclass
class Run:
    """One part (proxy or router) on one stack mode, one round."""

    part: str
    mode: str
    round: int
    events: int
    cpu_s_per_m_events: float
    p50_ms: float
    p99_ms: float


def stack_env(state: Path, mode: str) -> dict[str, str]:
    """This process' environment (its KEYSTONE_* settings too, which `Settings` here reads),
    with the stack's state directory and Kafka's security."""
    return os.environ | {"KEYSTONE_STATE_DIR": str(state), "KEYSTONE_KAFKA_SECURITY": mode}


@contextmanager
def stack(state: Path, mode: str) -> Iterator[Settings]:
    """The embedded stack in `state`, its Kafka in `mode`, up until the block ends."""
    keystone = str(Path(sys.executable).with_name("keystone"))
    env = stack_env(state, mode)
    with console.status(f"starting the stack, Kafka {mode}…"):
        started = subprocess.run(
            [keystone, "stack", "up"],
            env=env,
            capture_output=True,
            text=True,
            timeout=STACK_SECONDS,
            check=False,
        )
    try:
        if started.returncode != 0:
            raise RuntimeError(f"keystone stack up ({mode}) failed:\n{started.stdout[-2000:]}")
        yield Settings(state_dir=state, kafka_security=mode)
    finally:
        with console.status("stopping the stack…"):
            subprocess.run(
                [keystone, "stack", "down"],
                env=env,
                capture_output=True,
                timeout=STACK_SECONDS,
                check=False,
            )


def proxy_run(settings: Settings, mode: str, round_: int, rate: int, seconds: int) -> Run:
    processes = proxy_processes(settings)
    assert processes is not None, "the embedded proxy runs"
    with proxy_bench.bench_stream(settings) as (spec, key):
        url = f"{settings.proxy_url}/v1/streams/{spec.name}/events"
        said = f"proxy, Kafka {mode}: {rate:,} events/s for {seconds} s…"
        with console.status(said), CpuMeter(processes, every=None) as meter:
            result = asyncio.run(proxy_bench.steady(url, key, BATCH, rate / BATCH, seconds))
    if result.errors:
        raise RuntimeError(f"the proxy answered {result.errors} requests with other than 202")
    return Run(
        "proxy",
        mode,
        round_,
        result.events,
        per_million(meter.seconds, result.events) or 0.0,
        result.p50_ms or 0.0,
        result.p99_ms or 0.0,
    )


def router_run(
    settings: Settings, mode: str, round_: int, rate: int, seconds: int, settle: int
) -> Run:
    topics: list[str] = []
    with deployed_bench.router_target(settings, rate, topics) as target:
        with console.status(f"router, Kafka {mode}: settling for {settle} s…"):
            deployed_bench.send(settings, target.source, rate * settle, rate)
        measured = deployed_bench.phase(settings, target, rate, round_, 0, seconds)
    if measured.missing:
        raise RuntimeError(f"the router's output lacks {measured.missing} measured events")
    return Run(
        "router",
        mode,
        round_,
        measured.events,
        measured.cpu_s_per_m_events or 0.0,
        measured.p50_ms,
        measured.p99_ms,
    )


def rounds(args: argparse.Namespace, states: dict[str, Path]) -> list[Run]:
    runs: list[Run] = []
    for round_ in range(1, args.rounds + 1):
        order = MODES if round_ % 2 else MODES[::-1]
        for mode in order:
            with stack(states[mode], mode) as settings:
                runs.append(proxy_run(settings, mode, round_, args.rate, args.seconds))
                runs.append(
                    router_run(settings, mode, round_, args.rate, args.seconds, args.settle)
                )
            console.print(runs_table(runs[-2:]))
    return runs


def median(runs: list[Run], part: str, mode: str, field: str) -> float:
    return statistics.median(getattr(r, field) for r in runs if (r.part, r.mode) == (part, mode))


def ratios(runs: list[Run], part: str, field: str) -> list[float]:
    """The secured run's figure over the plaintext one's, per round."""
    found = []
    for round_ in sorted({r.round for r in runs}):
        pair = {r.mode: getattr(r, field) for r in runs if (r.part, r.round) == (part, round_)}
        if pair.get("plaintext"):
            found.append(pair["sasl_ssl"] / pair["plaintext"])
    return found or [float("nan")]  # no plaintext figure to divide by (a smoke run's)


def runs_table(runs: list[Run]) -> Table:
    table = terminal.table("part", "Kafka", "round", "events", CPU_COLUMN, "p50 ms", "p99 ms")
    for r in runs:
        table.add_row(
            r.part,
            r.mode,
            str(r.round),
            f"{r.events:,}",
            f"{r.cpu_s_per_m_events:.1f}",
            f"{r.p50_ms:.1f}",
            f"{r.p99_ms:.1f}",
        )
    return table


def markdown(runs: list[Run], args: argparse.Namespace) -> str:
    rows = []
    for part in ("proxy", "router"):
        cpu = ratios(runs, part, "cpu_s_per_m_events")
        rows.append(
            f"| {part} | {median(runs, part, 'plaintext', 'cpu_s_per_m_events'):.1f} | "
            f"{median(runs, part, 'sasl_ssl', 'cpu_s_per_m_events'):.1f} | "
            f"{statistics.median(cpu):.2f} ({min(cpu):.2f} to {max(cpu):.2f}) | "
            f"{median(runs, part, 'plaintext', 'p50_ms'):.1f} / "
            f"{median(runs, part, 'plaintext', 'p99_ms'):.1f} | "
            f"{median(runs, part, 'sasl_ssl', 'p50_ms'):.1f} / "
            f"{median(runs, part, 'sasl_ssl', 'p99_ms'):.1f} |"
        )
    return (
        f"Command: `{COMMAND}` ({args.rounds} rounds of {args.seconds} s at "
        f"{args.rate:,} events/s; the router settled {args.settle} s first), "
        f"{time.strftime('%Y-%m-%d')}.\nMachine: {machine()}.\n"
        "Each round ran the stack with its Kafka in plaintext and secured (TLS, SCRAM-SHA-512, "
        "ACLs), which first alternating. Proxy: its processes' CPU per million events of batch-"
        "100 requests posted open-loop, latency from each request's scheduled send. Router: one "
        "realtime Kafka output as control deploys it, its process tree's CPU per million events, "
        "latency from each output record's broker append time. Medians over the rounds; the "
        "ratio's range is its spread over the rounds.\n\n"
        f"| part | plaintext {CPU_COLUMN} | secured {CPU_COLUMN} | secured / plaintext | "
        "plaintext p50 / p99 ms | secured p50 / p99 ms |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: |\n" + "\n".join(rows) + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds, each mode once in each")
    parser.add_argument("--rate", type=int, default=5000, help="events per second")
    parser.add_argument("--seconds", type=int, default=60, help="seconds measured per part")
    parser.add_argument(
        "--settle", type=int, default=60, help="seconds of load the router gets first, unmeasured"
    )
    args = parse_arguments(parser)
    if args.smoke:
        args.rounds, args.rate, args.seconds, args.settle = 1, 500, 3, 2
    work = Path(tempfile.mkdtemp(prefix="keystone-security-bench-"))
    work.chmod(0o755)  # PostgreSQL runs as its own user and must reach its folder
    states = {mode: work / mode for mode in MODES}
    try:
        runs = rounds(args, states)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    console.print(runs_table(runs))
    for part in ("proxy", "router"):
        cpu = ratios(runs, part, "cpu_s_per_m_events")
        console.print(f"{part}: secured / plaintext CPU per event {statistics.median(cpu):.2f}")
    save_figures(Settings(), "security", {"smoke": args.smoke, "runs": [asdict(r) for r in runs]})
    if args.write_docs:
        write_section("security-bench", "Kafka secured, beside plaintext", markdown(runs, args))
        console.print("wrote docs/benchmarks.md")


if __name__ == "__main__":
    main()
