"""`keystone audit`: who changed what, and when."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.text import Text

from keystone import terminal
from keystone.cli.common import JsonOption, console, control, emit


def audit(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("-n", "--limit", min=1, max=10000)] = 50,
    as_json: JsonOption = False,
) -> None:
    """Who changed what, and when, newest first."""
    with control(ctx) as client:
        entries = client.audit(limit)
    if as_json:
        emit(entries)
        return
    table = terminal.table("when (UTC)", "who", "action", "target", "detail")
    for e in entries:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e.at))
        detail = ", ".join(f"{k}={v}" for k, v in e.detail.items() if v)
        table.add_row(when, e.who, e.action, e.target, Text(detail))
    console.print(table)
