"""The `keystone` command. Errors the project raises on purpose (KeystoneError) become one
clear line on stderr and exit code 1, here and nowhere else."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table
from rich.text import Text

from contracts.errors import KeystoneError
from contracts.settings import Settings
from contracts.spec import load_spec
from control.provisioner import ensure_topics
from control.store import Store
from control.validation import check_spec
from ingest_proxy import cli as proxy_cli
from stack import cli as stack_cli

app = typer.Typer(
    help="Keystone: a multi-tenant event router on Apache Spark.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
apps = typer.Typer(help="Producing apps and their keys.", no_args_is_help=True)
streams = typer.Typer(help="Streams: their specs and topics.", no_args_is_help=True)
app.add_typer(stack_cli.app, name="stack")
app.add_typer(apps, name="app")
app.add_typer(streams, name="stream")
app.command()(stack_cli.sql)
app.command()(proxy_cli.send)
console = Console()
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


@app.callback()
def _settings(ctx: typer.Context) -> None:
    """Settings come from KEYSTONE_* environment variables, a .env file, or defaults."""
    ctx.obj = Settings()


@apps.command("create")
def app_create(
    ctx: typer.Context,
    name: str,
    rate: Annotated[int, typer.Option(min=0, help="Quota in events/s; 0 = none.")] = 0,
    as_json: JsonOption = False,
) -> None:
    """Register a producing app; its key is shown once and stored only hashed."""
    key = Store.connect(ctx.obj).create_app(name, rate)
    if as_json:
        print(json.dumps({"name": name, "key": key, "rate": rate}))
    else:
        console.print(f"app [bold]{name}[/] created; its key (shown only now):\n{key}")


@streams.command("create")
def stream_create(
    ctx: typer.Context,
    file: Annotated[
        typer.FileText, typer.Option("-f", "--file", help="The spec, YAML or JSON; - for stdin")
    ],
    as_json: JsonOption = False,
) -> None:
    """Validate a stream spec, create its topics and register it (again: update it)."""
    spec = load_spec(file.read())
    check_spec(spec)
    created = ensure_topics(ctx.obj, spec)
    Store.connect(ctx.obj).put_stream(spec)
    if as_json:
        print(json.dumps({"stream": spec.name, "topics_created": created}))
    else:
        console.print(
            f"stream [bold]{spec.name}[/] registered; topics created: "
            f"{', '.join(created) or 'none (they existed)'}"
        )


@streams.command("list")
def stream_list(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Every registered stream."""
    specs = Store.connect(ctx.obj).streams()
    if as_json:
        print(json.dumps([json.loads(s.to_json()) for s in specs]))
        return
    table = Table("stream", "owner", "partitions", "producers", "outputs")
    for s in specs:
        table.add_row(
            s.name,
            s.owner,
            str(s.partitions),
            ", ".join(s.producers),
            ", ".join(f"{o.name} ({o.sink.type})" for o in s.outputs),
        )
    console.print(table)


def main() -> None:
    err = Console(stderr=True, soft_wrap=True)
    try:
        app()
    except KeystoneError as e:
        extra = {k: v for k, v in e.details.items() if k != "retry_after"}
        # Messages quote user input and patterns such as [a-z]: never read them as markup.
        err.print(Text.assemble(("error:", "red"), " ", str(e)), highlight=False)
        if extra:
            err.print(json.dumps(extra, indent=2), highlight=False, markup=False)
        sys.exit(1)
    except ValidationError as e:
        err.print(f"error: invalid KEYSTONE_* settings:\n{e}", highlight=False, markup=False)
        sys.exit(2)
