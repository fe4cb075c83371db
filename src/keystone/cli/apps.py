"""`keystone app create | list | grant | ungrant | rotate | delete`: producing apps and keys."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from keystone.cli.common import JsonOption, console, control, done, emit, show_secret
from keystone.contracts.registry import check_label

app = typer.Typer(
    help="Producing apps, their keys and the streams they may post to.", no_args_is_help=True
)


@app.command("create")
def app_create(
    ctx: typer.Context,
    name: str,
    rate: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Quota in events/s. Default: none for the admin, the largest allowed for an "
            "owner; 0 = none (the admin's only).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Register a producing app; its key is shown once and stored only hashed."""
    check_label(name, "app")
    with control(ctx) as client:
        answer = client.create_app(name, rate)
    show_secret(answer, as_json, f"app [bold]{name}[/] created; its key")


@app.command("list")
def app_list(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Your apps and the streams each may post to."""
    with control(ctx) as client:
        found = client.apps()
    if as_json:
        emit(found)
        return
    table = Table("app", "owner", "quota (events/s)", "streams")
    for a in found:
        table.add_row(a.name, a.owner, str(a.rate or "none"), ", ".join(a.streams))
    console.print(table)


@app.command("grant")
def app_grant(ctx: typer.Context, app_name: str, stream: str, as_json: JsonOption = False) -> None:
    """Let an app post events to a stream of yours."""
    with control(ctx) as client:
        answer = client.grant(stream, app_name)
    done(answer, as_json, f"app [bold]{app_name}[/] may now post to [bold]{stream}[/]")


@app.command("ungrant")
def app_ungrant(
    ctx: typer.Context, app_name: str, stream: str, as_json: JsonOption = False
) -> None:
    """Take back an app's right to post to a stream."""
    with control(ctx) as client:
        answer = client.revoke(stream, app_name)
    done(answer, as_json, f"app [bold]{app_name}[/] may no longer post to [bold]{stream}[/]")


@app.command("rotate")
def app_rotate(ctx: typer.Context, name: str, as_json: JsonOption = False) -> None:
    """Give an app a new key; the old one stops working within a second."""
    with control(ctx) as client:
        answer = client.rotate_app(name)
    show_secret(answer, as_json, f"app [bold]{name}[/]'s new key")


@app.command("delete")
def app_delete(ctx: typer.Context, name: str, as_json: JsonOption = False) -> None:
    """Revoke an app: its key stops working and it leaves every stream's producers."""
    with control(ctx) as client:
        client.delete_app(name)
    done({"app": name, "deleted": True}, as_json, f"app [bold]{name}[/] revoked")
