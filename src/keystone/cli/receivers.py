"""`keystone receiver add | list | remove`: where your streams' alerts go."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from keystone import terminal
from keystone.cli.common import JsonOption, console, control, done, emit
from keystone.contracts.receivers import ReceiverKind

app = typer.Typer(help="Where your streams' alerts go.", no_args_is_help=True)


@app.command("add")
def receiver_add(
    ctx: typer.Context,
    name: str,
    kind: Annotated[ReceiverKind, typer.Option(help="webhook, slack or email.")],
    url_file: Annotated[
        Path | None,
        typer.Option(
            help="A file holding the webhook's or Slack's URL ('-': read it from standard "
            "input). Never on the command line: it may hold a credential.",
        ),
    ] = None,
    to: Annotated[str | None, typer.Option(help="An e-mail receiver's address.")] = None,
    channel: Annotated[str | None, typer.Option(help="A Slack receiver's channel.")] = None,
    resolved: Annotated[bool, typer.Option(help="Say so too when an alert is resolved.")] = True,
    as_json: JsonOption = False,
) -> None:
    """Register a receiver of your streams' alerts."""
    request: dict[str, Any] = {"name": name, "kind": kind, "send_resolved": resolved}
    if url_file is not None:
        text = sys.stdin.read() if str(url_file) == "-" else url_file.read_text()
        request["url"] = text.strip()
    if to is not None:
        request["to"] = to
    if channel is not None:
        request["channel"] = channel
    with control(ctx) as client:
        answer = client.add_receiver(request)
    done(answer, as_json, f"receiver [bold]{name}[/] sends to {answer.where}")


@app.command("list")
def receiver_list(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Your receivers (the admin: everyone's)."""
    with control(ctx) as client:
        found = client.receivers()
    if as_json:
        emit(found)
        return
    table = terminal.table("receiver", "owner", "kind", "sends to", "resolved too")
    for r in found:
        table.add_row(r.name, r.owner, r.kind, r.where, "yes" if r.send_resolved else "no")
    console.print(table)


@app.command("remove")
def receiver_remove(
    ctx: typer.Context,
    name: str,
    owner: Annotated[str | None, typer.Option(help="Whose (the admin only).")] = None,
) -> None:
    """Remove one of your receivers."""
    with control(ctx) as client:
        client.remove_receiver(name, owner)
    console.print(f"receiver [bold]{name}[/] removed")
