"""The `keystone` command: the stack, and the control API's streams, outputs, apps, owners,
previews and audit log, with readable tables or `--json` for scripts. Errors the project raises
on purpose (KeystoneError) become one clear line on stderr and exit code 1, here (`main`) and
nowhere else.

One module per command group or command; `common` holds what they share. The top layer: it may
import every other package (`keystone.stack` only from `stack`). No module here imports Spark:
the commands that need it (`sql`, `loadtest`, `demo`) import it when they run.
"""

from __future__ import annotations

import json
import sys

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.text import Text

from keystone.cli import (
    apps,
    audit,
    dashboard,
    deadletters,
    fronting,
    loadtest,
    outputs,
    owners,
    receivers,
    send,
    shadows,
    silences,
    stack,
    streams,
)
from keystone.contracts.errors import KeystoneError
from keystone.contracts.settings import Settings

app = typer.Typer(
    help="Keystone: a multi-tenant event router on Apache Spark.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
# Commands, then groups: the order `keystone --help` lists them in.
app.command()(stack.sql)
app.command()(send.send)
app.command()(outputs.preview)
app.command()(audit.audit)
app.command()(dashboard.dashboard)
app.command()(loadtest.loadtest)
app.command()(loadtest.demo)
app.add_typer(stack.app, name="stack")
app.add_typer(streams.app, name="stream")
app.add_typer(outputs.app, name="output")
app.add_typer(deadletters.app, name="dead-letters")
app.add_typer(apps.app, name="app")
app.add_typer(owners.app, name="owner")
app.add_typer(fronting.app, name="fronting")
app.add_typer(receivers.app, name="receiver")
app.add_typer(silences.app, name="silence")
app.add_typer(shadows.app, name="shadow")


@app.callback()
def _settings(ctx: typer.Context) -> None:
    """Settings come from KEYSTONE_* environment variables, a .env file, or defaults."""
    ctx.obj = Settings()


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
