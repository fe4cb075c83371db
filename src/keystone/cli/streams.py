"""`keystone stream create | apply | list | show | lineage | delete`.

Specs are checked here first (without I/O: the same checks control runs), so a typo is caught
before anything is sent; control checks everything again and owns the decision.
"""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer
import yaml
from rich.text import Text

from keystone import terminal
from keystone.cli.common import (
    JsonOption,
    SpecFile,
    console,
    control,
    done,
    emit,
    plain,
    styled_state,
)
from keystone.contracts.settings import Settings
from keystone.contracts.spec import load_spec
from keystone.control.models import StreamPublic
from keystone.control.validation import check_spec

app = typer.Typer(help="Streams: their specs, routers and status.", no_args_is_help=True)


def _checked_spec(text: str) -> dict:
    spec = load_spec(text)
    check_spec(spec, Settings())  # the limits configured here; control checks with its own
    return json.loads(spec.to_json())


@app.command("create")
def stream_create(ctx: typer.Context, file: SpecFile, as_json: JsonOption = False) -> None:
    """Create a stream from its spec: checked, provisioned, and its router deployed."""
    spec = _checked_spec(file.read())
    with control(ctx) as client:
        _report_change(client.create_stream(spec), "created", as_json)


@app.command("apply")
def stream_apply(
    ctx: typer.Context,
    file: SpecFile,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Apply a new schema even where it removes or retypes a field an output reads.",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Create a stream or replace its spec (its router is redeployed when it changed). A new
    schema that removes or retypes a field an output reads is refused, naming each output and
    field, unless --force."""
    spec = _checked_spec(file.read())
    with control(ctx) as client:
        _report_change(client.put_stream(spec, force), "applied", as_json)


def _report_change(answer: StreamPublic, verb: str, as_json: bool) -> None:
    if as_json:
        emit(answer)
        return
    made = ", ".join(answer.provisioned) or "nothing new"
    console.print(f"stream [bold]{answer.spec.name}[/] {verb}; provisioned: {made}")
    for warning in answer.warnings:
        console.print(Text(f"warning: {warning}", style="yellow"))


@app.command("lineage")
def stream_lineage(ctx: typer.Context, name: str, as_json: JsonOption = False) -> None:
    """Which outputs read which of the stream's fields, beside its schema."""
    with control(ctx) as client:
        found = client.lineage(name)
    if as_json:
        emit(found)
        return
    table = terminal.table("field", "schema", "read by")
    for use in found.fields:
        readers = ", ".join(f"{r.output} ({', '.join(r.reads_in)})" for r in use.outputs)
        declared = use.declared if use.declared is not None else Text("not declared", "yellow")
        table.add_row(use.field, declared, readers or Text("no output", "dim"))
    console.print(table)
    if found.whole:
        console.print(f"every field, as '*': {', '.join(found.whole)}")
    for field in found.undeclared:
        console.print(
            Text(f"warning: outputs read {field}, which the schema does not declare", "yellow")
        )


@app.command("list")
def stream_list(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """The streams you own (every stream, for the admin)."""
    with control(ctx) as client:
        found = client.streams()
    if as_json:
        emit(found)
        return
    table = terminal.table("stream", "owner", "partitions", "producers", "outputs", "router")
    for s in found:
        spec = s.spec
        table.add_row(
            spec.name,
            spec.owner,
            str(spec.partitions),
            ", ".join(spec.producers),
            ", ".join(f"{o.name} ({o.sink.type})" for o in spec.outputs),
            styled_state(s.router.state),
        )
    console.print(table)


@app.command("show")
def stream_show(ctx: typer.Context, name: str, as_json: JsonOption = False) -> None:
    """A stream's spec, its router and, per output, rates, lag and latency."""
    with control(ctx) as client:
        stream = client.stream(name)
        status = client.status(name)
    if as_json:
        emit({**plain(stream), "status": plain(status)})
        return
    console.print(Text(yaml.safe_dump(plain(stream.spec), sort_keys=False).rstrip()))
    router = status.router
    line = f"router: {styled_state(router.state)}"
    if router.pid:
        line += f"  pid {router.pid}  for {router.for_seconds:.0f} s"
    if router.restarts:
        line += f"  {router.restarts} restarts"
    if router.sizing:
        line += f"  {router.sizing}"
    console.print(line)
    if router.last_error:
        console.print(Text(f"last error: {router.last_error}", style="red"))
    if status.fronting is not None:
        where = status.fronting
        line = f"writes go to fronting cluster {where.cluster}" + (" (home)" if where.home else "")
        if where.since:
            moved = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(where.since))
            line += f", moved {moved} UTC ({where.reason})"
        console.print(line)
    for alert in status.alerts:
        where = f" ({alert.output})" if alert.output else ""
        line = f"alert {alert.alert}{where}: {alert.state} since {alert.since}"
        style = "red" if alert.state == "firing" else "yellow"
        console.print(Text(f"{line}, to {', '.join(alert.receivers) or 'nobody'}", style=style))
    if status.alerts_error:
        console.print(Text(f"alerts unavailable: {status.alerts_error}", style="yellow"))
    for warning in stream.warnings:
        console.print(Text(f"warning: {warning}", style="yellow"))
    if status.metrics_error:
        console.print(Text(f"rates unavailable: {status.metrics_error}", style="yellow"))
    table = terminal.table(
        "output",
        "sink",
        "guarantee",
        "in/s",
        "matched/s",
        "delivered/s",
        "delivered",
        "dead letters",
        "lag",
        "p99",
    )
    archive = [status.archive] if status.archive is not None else []
    for o in [*status.outputs, *archive]:
        rates, totals = o.rates, o.totals
        table.add_row(
            "(archive)" if o is status.archive else o.name,
            o.sink,
            o.guarantee.replace("_", " "),
            *(f"{rates.get(s, 0):.1f}" for s in ("in", "matched", "delivered")),
            f"{totals.get('delivered', 0):.0f}",
            f"{totals.get('dead_letter', 0):.0f}",
            "-" if o.lag is None else f"{o.lag:.0f}",
            "-" if o.latency_p99 is None else f"{o.latency_p99 * 1000:.0f} ms",
        )
    console.print(table)
    for o in status.outputs:
        shadow = o.shadow
        if shadow is not None and shadow.state != "ended":
            console.print(
                f"shadow [bold]{shadow.id}[/] of {o.name}: {shadow.state}, "
                f"{shadow.compared:,} events compared, {shadow.counts['differing']:,} differing "
                f"(`keystone shadow show {name} {o.name}`)"
            )


@app.command("delete")
def stream_delete(ctx: typer.Context, name: str, as_json: JsonOption = False) -> None:
    """Stop a stream's router and forget the stream (its topics, tables and indices stay)."""
    with control(ctx) as client:
        client.delete_stream(name)
    done(
        {"stream": name, "deleted": True},
        as_json,
        f"stream [bold]{name}[/] deleted; its router is stopping",
    )
