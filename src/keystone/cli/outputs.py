"""`keystone output set | delete | restore-points | rewind`, and `keystone preview` of an output
or a draft of one."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer
import yaml
from pydantic import ValidationError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.text import Text

from keystone import terminal
from keystone.cli.common import (
    JsonOption,
    SpecFile,
    console,
    control,
    done,
    emit,
    follow_job,
    plan_then_start,
)
from keystone.contracts.errors import InvalidSpec, KeystoneError
from keystone.contracts.spec import OutputSpec, field_errors
from keystone.control.client import ControlClient
from keystone.control.models import BackfillPublic, RewindPublic

app = typer.Typer(help="A stream's outputs: filter, projection, sink.", no_args_is_help=True)


@app.command("set")
def output_set(
    ctx: typer.Context, stream: str, file: SpecFile, as_json: JsonOption = False
) -> None:
    """Add an output to a stream, or change it (one output's spec, YAML or JSON)."""
    data = yaml.safe_load(file.read())
    try:
        output = OutputSpec.model_validate(data)
    except ValidationError as e:
        raise InvalidSpec("the output is not valid", problems=field_errors(e)) from e
    with control(ctx) as client:
        answer = client.put_output(stream, json.loads(output.model_dump_json()))
    done(answer, as_json, f"output [bold]{stream}.{output.name}[/] set; the router redeploys")


@app.command("delete")
def output_delete(
    ctx: typer.Context, stream: str, output: str, as_json: JsonOption = False
) -> None:
    """Remove an output from a stream."""
    with control(ctx) as client:
        answer = client.delete_output(stream, output)
    done(answer, as_json, f"output [bold]{stream}.{output}[/] removed")


def preview(
    ctx: typer.Context,
    stream: str,
    output: str,
    filter_text: Annotated[
        str | None, typer.Option("--filter", help="Try this filter instead of the output's.")
    ] = None,
    projection: Annotated[
        list[str] | None, typer.Option("--projection", "-p", help="Repeat for each item.")
    ] = None,
    limit: Annotated[int, typer.Option("-n", "--limit", min=1, max=1000)] = 20,
    shadow: Annotated[
        bool, typer.Option("--shadow", help="The output's running shadow's version instead.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """What an output (or a draft of one) would deliver of the stream's newest events: each
    event, and the record it gives, the fields a function made (hashed, masked, computed) in
    bold."""
    with control(ctx) as client:
        result = client.preview(
            stream, output, filter=filter_text, projection=projection, limit=limit, shadow=shadow
        )
    if as_json:
        emit(result)
        return
    table = terminal.table("guid", "ingested (UTC)", "event", "record")
    computed = set(result.computed)
    for item in result.records:
        when = time.strftime("%H:%M:%S", time.gmtime(item["timestamp"] / 1000))
        table.add_row(
            item["guid"], when, Text(json.dumps(item["event"])), _record(item["record"], computed)
        )
    console.print(table)
    console.print(
        f"{result.matched} of the last {result.scanned} events match"
        + (f"; {result.unreadable} unreadable (dead letters)" if result.unreadable else "")
    )


def _record(record: dict, computed: set[str]) -> Text:
    """The record as JSON, the members a function made in bold."""
    text = Text("{")
    for i, (name, value) in enumerate(record.items()):
        member = f"{', ' if i else ''}{json.dumps(name)}: {json.dumps(value)}"
        text.append(member, style="bold yellow" if name in computed else "")
    return text.append("}")


@app.command("restore-points")
def restore_points(
    ctx: typer.Context, stream: str, output: str, as_json: JsonOption = False
) -> None:
    """The positions an output has committed, newest first: what it can be rewound to."""
    with control(ctx) as client:
        points = client.restore_points(stream, output)
    if as_json:
        emit(points)
        return
    table = terminal.table("id", "time (UTC)", "offsets per partition")
    for point in points:
        offsets = ", ".join(f"{p}:{o}" for p, o in sorted(point.offsets.items()))
        table.add_row(point.id, point.time.strftime("%Y-%m-%d %H:%M:%S"), offsets)
    console.print(table)
    console.print(f"{len(points)} restore points of {stream}.{output}")


def _offsets(text: str) -> dict[int, int]:
    try:
        pairs = [item.split(":") for item in text.split(",")]
        return {int(p): int(o) for p, o in pairs}
    except ValueError as e:
        raise typer.BadParameter("partition:offset pairs, like 0:120,1:98") from e


@app.command("rewind")
def rewind(
    ctx: typer.Context,
    stream: str,
    output: str,
    to: Annotated[
        str | None, typer.Option("--to", help="A time with its zone: 2026-11-25T10:00Z.")
    ] = None,
    restore_point: Annotated[
        str | None, typer.Option("--restore-point", help="A restore point's id.")
    ] = None,
    offsets: Annotated[
        str | None, typer.Option("--offsets", help="Per partition: 0:120,1:98.")
    ] = None,
    rate: Annotated[
        int | None, typer.Option("--rate", min=1, help="Events per second of the replay.")
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask to confirm.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what it would do.")] = False,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Follow the replay until it has caught up.")
    ] = True,
    as_json: JsonOption = False,
) -> None:
    """Take one output back to a restore point, a time or offsets; its router replays from
    there (its other outputs go on). Says first what each sink will see, and asks."""
    request: dict = {"max_events_per_second": rate}
    if to is not None:
        request["to"] = to
    if restore_point is not None:
        request["restore_point"] = restore_point
    if offsets is not None:
        request["offsets"] = _offsets(offsets)
    with control(ctx) as client:
        started = plan_then_start(
            lambda asked: client.rewind(stream, output, asked),
            request,
            _say,
            "Rewind?",
            dry_run=dry_run,
            yes=yes,
            as_json=as_json,
        )
        if started is None:
            return
        console.print(f"rewind [bold]{started.id}[/] of {stream}.{output} started")
        if wait:
            _follow(client, stream, output, started)


def _say(plan: RewindPublic) -> None:
    where = f"restore point {plan.restore_point}" if plan.restore_point else plan.target
    console.print(
        f"{plan.stream}.{plan.output} goes back to {where}: {plan.events:,} events replayed at "
        f"up to {plan.rate:,}/s (about {plan.eta_seconds or 0:.0f} s)."
    )
    console.print(f"[bold]{plan.sink.kind}[/]: {plan.sink.effect}")


def _follow(client: ControlClient, stream: str, output: str, started: RewindPublic) -> None:
    """A progress bar of the replay until it has caught up (Ctrl-C leaves it running)."""
    columns = (
        TextColumn("replaying"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("replay", total=max(1, started.events))
        while True:
            try:
                now = client.rewind_progress(stream, output)
            except KeystoneError as e:  # control away for a moment: the replay goes on
                console.print(f"[yellow]{e.message}[/]")
                time.sleep(2)
                continue
            if now.id != started.id:
                raise KeystoneError(f"rewind {now.id} replaced {started.id}")
            bar.update(task, completed=now.replayed)
            if now.state != "replaying":
                break
            time.sleep(1)
    console.print(f"{stream}.{output} caught up: {started.events:,} events replayed")


@app.command("backfill")
def backfill(
    ctx: typer.Context,
    stream: str,
    output: str,
    start: Annotated[
        str | None,
        typer.Option("--from", help="Ingest time from, with its zone: 2026-11-01T00:00Z."),
    ] = None,
    end: Annotated[
        str | None, typer.Option("--to", help="Ingest time to (exclusive), at the latest now.")
    ] = None,
    rate: Annotated[int | None, typer.Option("--rate", min=1, help="Events per second.")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask to confirm.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what it would do.")] = False,
    status: Annotated[
        bool, typer.Option("--status", help="Show the output's latest backfill instead.")
    ] = False,
    cancel: Annotated[
        bool, typer.Option("--cancel", help="Stop the output's backfill under way.")
    ] = False,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Follow it until it has ended.")
    ] = True,
    as_json: JsonOption = False,
) -> None:
    """Route an output's events of a time range again from the stream's archive, through the
    output as it is now (a fixed filter, say), beside the live router. Says first what the
    sink will see, and asks."""
    with control(ctx) as client:
        if status or cancel:
            now = (
                client.cancel_backfill(stream, output)
                if cancel
                else client.backfill_progress(stream, output)
            )
            if as_json:
                emit(now)
            else:
                _say_backfill(now)
            return
        if start is None or end is None:
            raise typer.BadParameter("give --from and --to (or --status, or --cancel)")
        request = {"from": _when(start), "to": _when(end), "max_events_per_second": rate}
        started = plan_then_start(
            lambda asked: client.backfill(stream, output, asked),
            request,
            _say_backfill,
            "Backfill?",
            dry_run=dry_run,
            yes=yes,
            as_json=as_json,
        )
        if started is None:
            return
        console.print(f"backfill [bold]{started.id}[/] of {stream}.{output} started")
        if wait:
            follow_job(
                "backfilling",
                started,
                lambda: client.backfill_progress(stream, output),
                _say_backfill,
            )


def _when(text: str) -> str:
    """A date alone is its midnight, UTC."""
    return f"{text}T00:00Z" if len(text) == 10 else text


def _say_backfill(backfill: BackfillPublic) -> None:
    span = f"{backfill.start:%Y-%m-%d %H:%M:%S} to {backfill.end:%Y-%m-%d %H:%M:%S} UTC"
    if backfill.state == "planned":
        console.print(
            f"{backfill.stream}.{backfill.output}: events ingested from {span} routed again "
            f"from the archive at up to {backfill.rate:,}/s."
        )
        console.print(f"[bold]{backfill.sink.kind}[/]: {backfill.sink.effect}")
        return
    of = f" of {backfill.events:,}" if backfill.events is not None else ""
    console.print(
        f"backfill {backfill.id} of {backfill.stream}.{backfill.output} ({span}): "
        f"[bold]{backfill.state}[/], {backfill.read:,}{of} events routed, "
        f"{backfill.delivered:,} delivered, {backfill.dead_lettered:,} dead-lettered"
        + (f", {backfill.unreadable:,} unreadable now (left out)" if backfill.unreadable else "")
    )
    if backfill.waiting:
        console.print(f"waiting for {backfill.waiting}")
    if backfill.error:
        console.print(Text(f"error: {backfill.error}", style="red"))
