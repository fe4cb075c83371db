"""`keystone dead-letters list | redrive`: a stream's dead letters, and sending them again once
their cause is fixed."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from keystone import terminal
from keystone.cli.common import JsonOption, console, control, emit, follow_job, plan_then_start
from keystone.control.models import RedrivePublic

app = typer.Typer(
    help="A stream's dead letters, grouped by output and reason, and their redrive.",
    no_args_is_help=True,
)


@app.command("list")
def dead_letters_list(
    ctx: typer.Context,
    stream: str,
    samples: Annotated[bool, typer.Option("--samples", help="Show each group's samples.")] = False,
    as_json: JsonOption = False,
) -> None:
    """The stream's dead letters by output ('_stream': the stream could not read them) and
    reason, most first."""
    with control(ctx) as client:
        listing = client.dead_letters(stream)
    if as_json:
        emit(listing)
        return
    table = terminal.table("output", "reason", "count", "redriven", "first (UTC)", "last (UTC)")
    for group in listing.groups:
        table.add_row(
            group.output,
            group.reason,
            f"{group.count:,}",
            f"{group.redriven:,}",
            f"{group.first:%Y-%m-%d %H:%M:%S}",
            f"{group.last:%Y-%m-%d %H:%M:%S}",
        )
        if samples:
            for sample in group.samples:
                table.add_row("", Text(f"{sample.guid}: {sample.event}", style="dim"))
    console.print(table)
    left_out = " (more left out: max_dead_letters_scanned)" if listing.truncated else ""
    console.print(f"{listing.scanned:,} dead letters of {stream}{left_out}")


@app.command("redrive")
def redrive(
    ctx: typer.Context,
    stream: str,
    reason: Annotated[str | None, typer.Option("--reason", help="A reason as listed.")] = None,
    output: Annotated[
        str | None, typer.Option("--output", help="An output, or _stream for the stream's own.")
    ] = None,
    start: Annotated[
        str | None, typer.Option("--from", help="Dead-lettered from: 2026-11-25T10:00Z.")
    ] = None,
    end: Annotated[str | None, typer.Option("--to", help="Dead-lettered before.")] = None,
    rate: Annotated[int | None, typer.Option("--rate", min=1, help="Events per second.")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask to confirm.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only count them.")] = False,
    status: Annotated[
        bool, typer.Option("--status", help="Show the stream's latest redrive instead.")
    ] = False,
    cancel: Annotated[bool, typer.Option("--cancel", help="Stop the redrive under way.")] = False,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Follow it until it has ended.")
    ] = True,
    as_json: JsonOption = False,
) -> None:
    """Send the stream's dead letters (those matching every option given; none: all) again
    through its current spec, each only to the outputs it failed in. Says first how many go
    where, and asks."""
    with control(ctx) as client:
        if status or cancel:
            now = client.cancel_redrive(stream) if cancel else client.redrive_progress(stream)
            if as_json:
                emit(now)
            else:
                _say(now)
            return
        request = {
            "reason": reason,
            "output": output,
            "from": start,
            "to": end,
            "max_events_per_second": rate,
        }
        request = {k: v for k, v in request.items() if v is not None}
        started = plan_then_start(
            lambda asked: client.redrive(stream, asked),
            request,
            _say,
            "Redrive?",
            dry_run=dry_run,
            yes=yes,
            as_json=as_json,
        )
        if started is None:
            return
        console.print(f"redrive [bold]{started.id}[/] of {stream} started")
        if wait:
            follow_job("redriving", started, lambda: client.redrive_progress(stream), _say)


def _say(redrive: RedrivePublic) -> None:
    chosen = ", ".join(f"{k} {v}" for k, v in redrive.selection.items()) or "all"
    if redrive.state == "planned":
        reach = ", ".join(f"{o}: {n:,}" for o, n in (redrive.outputs or {}).items())
        console.print(
            f"{redrive.events or 0:,} dead letters of {redrive.stream} ({chosen}) sent again at "
            f"up to {redrive.rate:,}/s, each only to the outputs it failed in ({reach})."
        )
        if redrive.skipped:
            console.print(f"{redrive.skipped:,} are of outputs the stream no longer has.")
        if redrive.copies:
            console.print(f"{redrive.copies:,} copies of those (written again) are not sent.")
        return
    of = f" of {redrive.events:,}" if redrive.events is not None else ""
    delivered = ", ".join(f"{o}: {n:,}" for o, n in redrive.delivered.items()) or "none"
    console.print(
        f"redrive {redrive.id} of {redrive.stream} ({chosen}): [bold]{redrive.state}[/], "
        f"{redrive.read:,}{of} sent; delivered {delivered}; "
        f"{redrive.dead_lettered:,} dead-lettered again"
        + (f"; {redrive.copies:,} copies of those not sent twice" if redrive.copies else "")
    )
    if redrive.error:
        console.print(Text(f"error: {redrive.error}", style="red"))
