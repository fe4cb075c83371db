"""The `keystone` command. Errors the project raises on purpose (KeystoneError) become one
clear line on stderr and exit code 1, here and nowhere else."""

from __future__ import annotations

import sys

import typer
from pydantic import ValidationError
from rich.console import Console

from contracts.errors import KeystoneError
from contracts.settings import Settings
from stack import cli as stack_cli

app = typer.Typer(
    help="Keystone: a multi-tenant event router on Apache Spark.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(stack_cli.app, name="stack")
app.command()(stack_cli.sql)


@app.callback()
def _settings(ctx: typer.Context) -> None:
    """Settings come from KEYSTONE_* environment variables, a .env file, or defaults."""
    ctx.obj = Settings()


def main() -> None:
    err = Console(stderr=True, soft_wrap=True)
    try:
        app()
    except KeystoneError as e:
        err.print(f"[red]error:[/] {e}", highlight=False)
        sys.exit(1)
    except ValidationError as e:
        err.print(f"[red]error:[/] invalid KEYSTONE_* settings:\n{e}", highlight=False)
        sys.exit(2)
