"""`keystone shadow start | show | promote | drop`: a changed output run beside the live one,
compared event by event (`control.shadows`)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Annotated

import typer
import yaml
from pydantic import ValidationError
from rich.console import Group
from rich.live import Live

from keystone import terminal
from keystone.cli.common import JsonOption, SpecFile, console, control, done, emit
from keystone.contracts.errors import InvalidSpec, KeystoneError
from keystone.contracts.shadows import Result
from keystone.contracts.spec import OutputSpec, field_errors
from keystone.control.models import ShadowPublic

app = typer.Typer(
    help="Shadows: a changed output run beside the live one, their records compared by guid.",
    no_args_is_help=True,
)

FollowOption = Annotated[
    bool, typer.Option("--follow", help="Show the comparison as it grows, until it ends.")
]


@app.command("start")
def shadow_start(
    ctx: typer.Context,
    stream: str,
    file: SpecFile,
    expires_in: Annotated[
        str | None, typer.Option(help="How long it runs at most: '30 minutes', '2 days'.")
    ] = None,
    rate: Annotated[
        int | None, typer.Option(min=1, help="Events a second it reads at most.")
    ] = None,
    follow: FollowOption = False,
    as_json: JsonOption = False,
) -> None:
    """Run a changed version of an output (one output's spec, YAML or JSON, named as the
    output) beside it, from where it has got to, into targets of its own."""
    try:
        output = OutputSpec.model_validate(yaml.safe_load(file.read()))
    except ValidationError as e:
        raise InvalidSpec("the output is not valid", problems=field_errors(e)) from e
    request = {
        "output": json.loads(output.model_dump_json()),
        "expires_in": expires_in,
        "max_events_per_second": rate,
    }
    with control(ctx) as client:
        started = client.shadow(stream, request)
        if as_json:
            emit(started)
            return
        console.print(
            f"shadow [bold]{started.id}[/] of [bold]{stream}.{output.name}[/] running, into "
            f"{', '.join(started.targets)}; it ends at {started.expires_at:%Y-%m-%d %H:%M} UTC"
        )
        if follow:
            _follow(lambda: client.shadow_view(stream, output.name), started)


@app.command("show")
def shadow_show(
    ctx: typer.Context,
    stream: str,
    output: str,
    follow: FollowOption = False,
    as_json: JsonOption = False,
) -> None:
    """The output's latest shadow: events compared, per result, the fields that differ, and
    samples of differing records (before, after)."""
    with control(ctx) as client:
        shadow = client.shadow_view(stream, output)
        if as_json:
            emit(shadow)
        elif follow:
            _follow(lambda: client.shadow_view(stream, output), shadow)
        else:
            console.print(view(shadow))


@app.command("promote")
def shadow_promote(
    ctx: typer.Context, stream: str, output: str, as_json: JsonOption = False
) -> None:
    """Make the shadow's version the output's, from where the output has got to; the shadow
    ends, its targets go."""
    with control(ctx) as client:
        answer = client.promote_shadow(stream, output)
    done(
        answer,
        as_json,
        f"shadow [bold]{answer.id}[/] promoted: [bold]{stream}.{output}[/] runs its version; "
        "the router redeploys",
    )


@app.command("drop")
def shadow_drop(ctx: typer.Context, stream: str, output: str, as_json: JsonOption = False) -> None:
    """End the shadow, the output unchanged; its targets go."""
    with control(ctx) as client:
        answer = client.drop_shadow(stream, output)
    done(answer, as_json, f"shadow [bold]{answer.id}[/] dropped; its targets go")


def _follow(read: Callable[[], ShadowPublic], started: ShadowPublic) -> None:
    """The comparison, drawn again every two seconds until the shadow ends (Ctrl-C leaves it
    running); control away for a moment is waited for."""
    shadow = started
    with Live(view(shadow), console=console, refresh_per_second=1) as live:
        while shadow.state == "running":
            time.sleep(2)
            try:
                now = read()
            except KeystoneError as e:
                console.print(f"[yellow]{e.message}[/]")
                continue
            if now.id != started.id:
                raise KeystoneError(f"{now.id} replaced {started.id}")
            shadow = now
            live.update(view(shadow))


def view(shadow: ShadowPublic) -> Group:
    """The shadow, its counts per result, its differing fields and samples."""
    state = shadow.state + (f" ({shadow.end})" if shadow.end else "")
    head = (
        f"shadow [bold]{shadow.id}[/] of [bold]{shadow.stream}.{shadow.output}[/]: {state}; "
        f"{shadow.compared:,} events compared, {shadow.delivered:,} records delivered, "
        f"{shadow.dead_lettered:,} dead-lettered"
    )
    counts = terminal.table("result", "events", "share")
    for result in Result:
        n = shadow.counts.get(result, 0)
        share = f"{n / shadow.compared:.1%}" if shadow.compared else "-"
        counts.add_row(result.value, f"{n:,}", share)
    parts: list[object] = [head, counts]
    if shadow.fields:
        fields = terminal.table("field", "differing events")
        for name, n in shadow.fields.items():
            fields.add_row(name, f"{n:,}")
        parts.append(fields)
    if shadow.samples:
        samples = terminal.table("guid", "field", "live", "shadow")
        for sample in shadow.samples[:5]:
            for name, (before, after) in sample.fields.items():
                samples.add_row(sample.guid, name, before or "(none)", after or "(none)")
        parts.append(samples)
    return Group(*parts)
