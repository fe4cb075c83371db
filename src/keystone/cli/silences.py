"""`keystone silence add | list | expire`: your streams' alerts, silenced for a while."""

from __future__ import annotations

from typing import Annotated

import typer

from keystone import terminal
from keystone.cli.common import JsonOption, console, control, done, emit

app = typer.Typer(help="Silence a stream's alerts for a while.", no_args_is_help=True)


@app.command("add")
def silence_add(
    ctx: typer.Context,
    stream: str,
    hours: Annotated[float, typer.Option(help="How long.")],
    alert: Annotated[
        str | None, typer.Option(help="One alert, by name (default: all of the stream's).")
    ] = None,
    comment: Annotated[str, typer.Option(help="Why.")] = "",
    as_json: JsonOption = False,
) -> None:
    """Silence a stream's alerts (or one of them): nobody is notified meanwhile."""
    request = {"hours": hours, "alert": alert, "comment": comment}
    with control(ctx) as client:
        answer = client.add_silence(stream, request)
    what = answer.alert or "every alert"
    done(answer, as_json, f"{what} of {stream} silenced until {answer.ends_at} ({answer.id})")


@app.command("list")
def silence_list(ctx: typer.Context, stream: str, as_json: JsonOption = False) -> None:
    """The stream's silences not yet expired."""
    with control(ctx) as client:
        found = client.silences(stream)
    if as_json:
        emit(found)
        return
    table = terminal.table("silence", "alert", "state", "until", "by", "comment")
    for s in found:
        table.add_row(s.id, s.alert or "all", s.state, s.ends_at, s.created_by, s.comment)
    console.print(table)


@app.command("expire")
def silence_expire(ctx: typer.Context, stream: str, silence: str) -> None:
    """End one of the stream's silences now."""
    with control(ctx) as client:
        client.expire_silence(stream, silence)
    console.print(f"silence {silence} of {stream} expired")
