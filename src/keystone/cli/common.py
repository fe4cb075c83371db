"""What the command groups share: the console, the `--json` and `--file` options, how answers
are printed (tables' router states, JSON, one sentence, a secret shown once) and the control
client of a command."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.util import find_spec
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from keystone.contracts.errors import KeystoneError
from keystone.contracts.registry import RouterPhase
from keystone.control.client import ControlClient
from keystone.control.models import AppKey, OwnerToken
from keystone.terminal import console

JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
SpecFile = Annotated[typer.FileText, typer.Option("-f", "--file", help="YAML or JSON; - for stdin")]
STATE_STYLE: dict[str, str] = {
    RouterPhase.RUNNING: "green",
    RouterPhase.RESTARTING: "red",
    RouterPhase.FAILED: "red",
    RouterPhase.NONE: "dim",
}  # the other phases (and any this CLI does not know yet) in yellow


@contextmanager
def control(ctx: typer.Context) -> Iterator[ControlClient]:
    with ControlClient.from_settings(ctx.obj) as client:
        yield client


def plain(data: Any) -> Any:
    """An answer as control sent it: models (and lists of them) as their JSON, by alias (a
    spec's `schema`), with the fields it sent and no others; anything else as it is."""
    if isinstance(data, BaseModel):
        return data.model_dump(mode="json", by_alias=True, exclude_unset=True)
    if isinstance(data, list):
        return [plain(item) for item in data]
    return data


def emit(data: Any) -> None:
    print(json.dumps(plain(data), indent=2))


def done(answer: Any, as_json: bool, message: str) -> None:
    """What a change command prints: control's answer as JSON, or one sentence."""
    if as_json:
        emit(answer)
    else:
        console.print(message)


def show_secret(answer: AppKey | OwnerToken, as_json: bool, what: str) -> None:
    """A new app key or owner token, the one time it is shown (control keeps only its hash):
    control's answer as one line of JSON, or `what` it is, and the secret on a line of its own."""
    if as_json:
        print(json.dumps(plain(answer)))
    else:
        secret = answer.key if isinstance(answer, AppKey) else answer.token
        console.print(f"{what} (shown only now):\n{secret}")
        if isinstance(answer, AppKey) and answer.kafka_password:
            console.print(f"its new Kafka password (shown only now):\n{answer.kafka_password}")


def needs_extra(module: str, extra: str, what: str) -> None:
    """Says which extra to install when a command needs an optional library that is missing,
    before the command begins."""
    if find_spec(module) is None:
        raise KeystoneError(f"{what} needs {module}: pip install 'keystone-router[{extra}]'")


def styled_state(state: str) -> str:
    """A router's state (a `RouterPhase`'s value) as console markup, in its colour."""
    return f"[{STATE_STYLE.get(state, 'yellow')}]{state}[/]"


def follow_job(
    what: str,
    started: Any,
    progress: Callable[[], Any],
    say: Callable[[Any], None],
) -> None:
    """A progress bar of a backfill or a redrive (`started`, read again by `progress`) until it
    has ended, then what became of it (`say`); exit code 1 unless it is done. Ctrl-C leaves it
    running; control away for a moment is waited for."""
    columns = (TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console) as bar:
        task = bar.add_task(what, total=None)
        while True:
            try:
                now = progress()
            except KeystoneError as e:
                console.print(f"[yellow]{e.message}[/]")
                time.sleep(2)
                continue
            if now.id != started.id:
                raise KeystoneError(f"{now.id} replaced {started.id}")
            bar.update(task, completed=now.read, total=now.events)
            if now.state not in ("running", "cancelling"):
                break
            time.sleep(1)
    say(now)
    if now.state != "done":
        raise typer.Exit(1)


def plan_then_start(
    ask: Callable[[dict[str, Any]], Any],
    request: dict[str, Any],
    say: Callable[[Any], None],
    question: str,
    *,
    dry_run: bool,
    yes: bool,
    as_json: bool,
) -> Any | None:
    """A rewind's, backfill's or redrive's plan first (`ask` with `dry_run`), said (`say`) and
    confirmed (`question`, unless `yes`); then the thing itself. What started, when there is
    more to show of it (None: a dry run, or `--json`, which printed it)."""
    plan = ask({**request, "dry_run": True})
    if dry_run:
        if as_json:
            emit(plan)
        else:
            say(plan)
        return None
    if not yes and not as_json:
        say(plan)
        typer.confirm(question, abort=True)
    started = ask(request)
    if as_json:
        emit(started)
        return None
    return started
