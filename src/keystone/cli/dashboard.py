"""`keystone dashboard`: a stream's live dashboard, its address or a picture of it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from keystone.cli.common import JsonOption, control, done, needs_extra
from keystone.contracts.settings import Settings


def dashboard(
    ctx: typer.Context,
    stream: str,
    png: Annotated[
        Path | None, typer.Option("--png", help="Draw the page into this PNG file.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """The address of a stream's live dashboard, or (--png) the dashboard as an image."""
    if png is not None:
        needs_extra("playwright", "images", "drawing a dashboard")
    settings: Settings = ctx.obj
    with control(ctx) as client:
        client.stream(stream)  # it exists, and it is yours
        token = client.token
    url = f"{settings.control_url}/ui/streams/{stream}/dashboard"
    if png is not None:
        from keystone.dashboards.render import render_png  # a browser only for a picture

        render_png(url, token, png)
    done(
        {"stream": stream, "url": url, "png": str(png) if png else None},
        as_json,
        url if png is None else f"{url} drawn into {png}",
    )
