"""`keystone fronting status | failover | failback`: the fronting Kafka clusters, which one
takes writes, and moving them (the admin's)."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from keystone import terminal
from keystone.cli.common import JsonOption, console, control, emit
from keystone.control.models import FrontingPublic

app = typer.Typer(help="The fronting Kafka clusters: which takes writes; fail over and back.")

StreamOption = Annotated[
    str | None, typer.Option("--stream", help="One stream's writes (default: every stream's).")
]


@app.command()
def status(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Each fronting cluster, whether it can take writes now, and which takes whose."""
    with control(ctx) as client:
        _show(client.fronting(), as_json)


@app.command()
def failover(
    ctx: typer.Context,
    to: Annotated[str, typer.Option("--to", help="The cluster to take the writes.")],
    stream: StreamOption = None,
    as_json: JsonOption = False,
) -> None:
    """Move writes to another fronting cluster: producers follow within seconds."""
    with control(ctx) as client:
        _show(client.switch_fronting(to, stream), as_json)


@app.command()
def failback(ctx: typer.Context, stream: StreamOption = None, as_json: JsonOption = False) -> None:
    """Move writes back to the home cluster (the first of the settings')."""
    with control(ctx) as client:
        _show(client.switch_fronting(None, stream), as_json)


def _show(found: FrontingPublic, as_json: bool) -> None:
    if as_json:
        emit(found)
        return
    table = terminal.table("cluster", "brokers", "takes writes of", "state")
    for c in found.clusters:
        if found.active == c.name:
            elsewhere = sorted(s for s, at in found.streams.items() if at != c.name)
            takes = "every stream" + (f" but {', '.join(elsewhere)}" if elsewhere else "")
        else:
            takes = ", ".join(sorted(s for s, at in found.streams.items() if at == c.name))
        name = c.name + (" (home)" if c.home else "")
        state = "[green]answers[/]" if c.problem is None else f"[red]lost[/]: {c.problem}"
        table.add_row(name, c.brokers, takes or "-", state)
    console.print(table)
    if found.since:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(found.since))
        console.print(f"last switched {when} UTC ({found.reason})")
