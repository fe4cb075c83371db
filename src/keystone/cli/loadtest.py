"""`keystone loadtest` and `keystone demo`: load driven through the stack, audited at the sinks.
Both read the sinks with Spark, so their libraries are imported in the commands alone: the rest
of the CLI starts without Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from keystone.cli.common import JsonOption, console, emit, needs_extra
from keystone.loadtest.faults import Fault


def seconds(text: str) -> float:
    """'90', '90s', '10m' or '1h' as seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    try:
        value = float(number) * units[unit]
    except ValueError as e:
        raise typer.BadParameter(f"{text!r}: a duration like 90, 90s, 10m or 1h") from e
    if value <= 0:
        raise typer.BadParameter(f"{text!r}: a duration above zero")
    return value


def loadtest(
    ctx: typer.Context,
    stream: Annotated[str, typer.Option(help="The stream to load (it must have outputs).")],
    rate: Annotated[float, typer.Option(min=1, help="Events per second, all producers.")] = 500,
    duration: Annotated[str, typer.Option(help="How long: 90, 90s, 10m, 1h.")] = "60s",
    event_size: Annotated[int, typer.Option(min=200, max=1_000_000)] = 1024,
    producers: Annotated[int, typer.Option(min=1, max=64)] = 4,
    direct: Annotated[
        str | None, typer.Option(help="Write straight to Kafka as this app, not via the proxy.")
    ] = None,
    fault: Annotated[
        list[str] | None,
        typer.Option(help=Fault.help()),
    ] = None,
    bad_events: Annotated[
        int,
        typer.Option(
            min=0,
            max=100_000,
            help="Events that dead-letter until a fix, then are redriven: the run puts a too "
            "strict schema on the stream (a stream without one), writes N events it refuses "
            "straight to Kafka over the first half of the time before the fix, puts the "
            "stream's own spec back at --fix-at, and redrives its dead letters.",
        ),
    ] = 0,
    fix_at: Annotated[
        float | None,
        typer.Option(help="Seconds into the run of the bad events' fix (default: half of it)."),
    ] = None,
    report: Annotated[Path | None, typer.Option(help="Report folder.")] = None,
    drain_timeout: Annotated[
        float, typer.Option(help="Seconds to wait for every sink to hold every event.")
    ] = 300,
    key: Annotated[
        str | None,
        typer.Option(
            help="App key to post with; default: the stream's load-test app's (loadtest-<stream>)."
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Drive a stream at a set rate, inject faults, audit every acknowledged guid at every
    sink, and report delivery rate, throughput and latency (exit 1 on any loss)."""
    needs_extra("matplotlib", "loadtest", "the load test's report")
    # Imported here: the load test's libraries (its audit reads the sinks with Spark).
    from keystone.loadtest.driver import Plan
    from keystone.loadtest.run import Options, run

    length = seconds(duration)
    options = Options(
        plan=Plan(stream, rate, length, event_size, producers),
        faults=[Fault.parse(f, length) for f in fault or []],
        direct=direct,
        bad_events=bad_events,
        fix_at=fix_at,
        key=key,
        report=report,
        drain_timeout=drain_timeout,
    )
    figures = run(ctx.obj, options, Console(stderr=True) if as_json else console)
    if as_json:
        emit({k: v for k, v in figures.items() if k not in ("producers_per_second", "sinks")})
    audit = figures["audit"]
    if not (audit["lossless"] and audit["drained"]):
        raise typer.Exit(1)


def demo(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Provision a demo stream with one output per sink type, send a burst of events through
    the proxy, and show what each sink received (the stack must be up)."""
    needs_extra("matplotlib", "loadtest", "the demo's report")
    from keystone.loadtest.demo import run  # imported here: Spark and the sinks' readers

    quiet = Console(stderr=True)  # progress to stderr, so --json leaves stdout to the figures
    results = run(ctx.obj, quiet if as_json else console)
    if as_json:
        emit(results)
    if any(r["received"] != r["expected"] for r in results):
        raise typer.Exit(1)
