"""`keystone stack up | down | status | logs | fetch` and `keystone sql`."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Annotated

import typer

from keystone import terminal
from keystone.cli.common import console
from keystone.contracts.errors import KeystoneError, StackError
from keystone.contracts.settings import Settings
from keystone.stack import cds, jars, lifecycle
from keystone.stack.services import all_services

app = typer.Typer(
    help="Run the embedded stack: Kafka, Redis, Elasticsearch, Hive metastore, Prometheus."
)

HEALTH_STYLE = {"healthy": "green", "unhealthy": "red", "stopped": "dim"}


class _Ticker:
    """Prints each step of a long operation with the seconds since it began."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def __call__(self, what: str, state: str) -> None:
        mark = {"healthy": "[green]✓[/]", "starting": "[yellow]…[/]"}.get(state, "•")
        console.print(
            f"{mark} {what:<30} {state:<12} [dim]{time.monotonic() - self.start:6.1f} s[/]"
        )


def _fetch(settings: Settings) -> None:
    tick = _Ticker()
    with console.status("fetching JVM artifacts from Maven Central (first time only)…"):
        jars.fetch_all(settings, lambda what, did: tick(what, "fetched" if did else "cached"))
    with console.status("building the Spark drivers' class archive (first time only)…"):
        tick("class archive spark-driver", "built" if cds.build(settings) else "cached")


@app.command()
def fetch(ctx: typer.Context) -> None:
    """Download the pinned jars into the cache and compile the Java classes (idempotent)."""
    _fetch(ctx.obj)


@app.command()
def up(ctx: typer.Context) -> None:
    """Start every service that is not running and wait until all are healthy."""
    settings: Settings = ctx.obj
    _fetch(settings)
    tick = _Ticker()
    with console.status("starting the stack…"):
        lifecycle.up(settings, tick)
    _print_status(settings)


@app.command()
def down(
    ctx: typer.Context,
    purge: Annotated[
        bool, typer.Option(help="Also delete the state (data, logs); keeps jars.")
    ] = False,
) -> None:
    """Stop exactly the processes the stack started; data stays in place."""
    lifecycle.down(ctx.obj, purge, _Ticker())


@app.command()
def status(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Every service with its address, pid and health; exits 1 unless all are healthy."""
    settings: Settings = ctx.obj
    if as_json:
        report = lifecycle.status_json(settings)
        print(json.dumps(report, indent=2))
        healthy = all(s["health"] == "healthy" for s in report["services"].values())
    else:
        healthy = _print_status(settings)
    raise typer.Exit(0 if healthy else 1)


def _print_status(settings: Settings) -> bool:
    rows = lifecycle.status(settings)
    table = terminal.table(
        "service",
        "address",
        "pid",
        "health",
        title=f"Keystone stack — state in {settings.state_dir}",
    )
    for s in rows:
        pid = str(s.pid) if s.pid else ("external" if not s.embedded else "-")
        table.add_row(s.name, s.address, pid, f"[{HEALTH_STYLE[s.health]}]{s.health}[/]")
    console.print(table)
    console.print(f"logs: {settings.logs_dir}/<service>.log  (keystone stack logs SERVICE)")
    return all(s.health == "healthy" for s in rows)


@app.command()
def logs(
    ctx: typer.Context,
    service: Annotated[
        str, typer.Argument(help="postgres, metastore, kafka, redis, elasticsearch or prometheus")
    ],
    lines: Annotated[int, typer.Option("-n", "--lines", min=1)] = 50,
    follow: Annotated[bool, typer.Option("-f", "--follow")] = False,
) -> None:
    """Show the end of a service's log."""
    known = {s.name: s for s in all_services(ctx.obj)}
    if service not in known:
        raise StackError(f"no service {service!r}; the stack has {', '.join(known)}")
    log = known[service].log
    if not log.exists():
        raise StackError(f"{service} has no log yet ({log}): has the stack been started?")
    subprocess.run(["tail", f"-n{lines}", *(["-F"] if follow else []), str(log)], check=False)


def sql(
    ctx: typer.Context,
    query: Annotated[
        str, typer.Argument(help='Spark SQL, e.g. "SELECT * FROM keystone.s__o LIMIT 10"')
    ],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per row.")] = False,
) -> None:
    """Run Spark SQL against the shared Hive metastore and print the rows."""
    # Imported here: Spark only for the commands that need it, the CLI starts without it.
    from pyspark.errors import PySparkException

    from keystone.router.spark import spark_session

    session = spark_session(ctx.obj, "keystone-sql", quiet=True)
    try:
        try:
            frame = session.sql(query)
            rows = frame.collect()
        except PySparkException as e:
            raise KeystoneError(f"the query failed: {e.getMessage()}") from e
        if as_json:
            for row in rows:
                print(json.dumps(row.asDict(recursive=True), default=str))
            return
        if not frame.columns:  # DDL and INSERT return no columns
            console.print("[green]OK[/]")
            return
        table = terminal.table(*frame.columns)
        for row in rows:
            table.add_row(*("NULL" if v is None else str(v) for v in row))
        console.print(table)
        console.print(f"[dim]{len(rows)} row(s)[/]")
    finally:
        session.stop()
