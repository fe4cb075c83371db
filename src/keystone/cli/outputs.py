"""`keystone output set | delete`, and `keystone preview` of an output or a draft of one."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer
import yaml
from pydantic import ValidationError
from rich.table import Table
from rich.text import Text

from keystone.cli.common import JsonOption, SpecFile, console, control, done, emit
from keystone.contracts.errors import InvalidSpec
from keystone.contracts.spec import OutputSpec, field_errors

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
    as_json: JsonOption = False,
) -> None:
    """What an output (or a draft of one) would deliver of the stream's newest events."""
    with control(ctx) as client:
        result = client.preview(
            stream, output, filter=filter_text, projection=projection, limit=limit
        )
    if as_json:
        emit(result)
        return
    table = Table("guid", "ingested (UTC)", "record")
    for item in result.records:
        when = time.strftime("%H:%M:%S", time.gmtime(item["timestamp"] / 1000))
        table.add_row(item["guid"], when, Text(json.dumps(item["record"])))
    console.print(table)
    console.print(
        f"{result.matched} of the last {result.scanned} events match"
        + (f"; {result.unreadable} unreadable (dead letters)" if result.unreadable else "")
    )
