"""`keystone app create | list | grant | ungrant | rotate | kafka | delete`: producing apps,
their keys and their own Kafka credentials."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from keystone import terminal
from keystone.cli.common import JsonOption, console, control, done, emit, plain, show_secret
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
    table = terminal.table("app", "owner", "quota (events/s)", "streams", "Kafka user")
    for a in found:
        row = (a.name, a.owner, str(a.rate or "none"), ", ".join(a.streams), a.kafka_user or "")
        table.add_row(*row)
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


@app.command("kafka")
def app_kafka(
    ctx: typer.Context,
    name: str,
    revoke: Annotated[
        bool, typer.Option("--revoke", help="Delete its Kafka user and ACLs instead.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Give an app its own Kafka user, to write straight to the streams it is granted (a new
    password each time; the old one stops working), or take it back with --revoke."""
    with control(ctx) as client:
        if revoke:
            client.revoke_kafka_credential(name)
            done(
                {"app": name, "kafka": False}, as_json, f"app [bold]{name}[/]'s Kafka user deleted"
            )
            return
        answer = client.issue_kafka_credential(name)
    if as_json:
        print(json.dumps(plain(answer)))
        return
    console.print(
        f"app [bold]{name}[/]'s Kafka user [bold]{answer.username}[/] "
        f"({answer.mechanism} over {answer.security_protocol}, {answer.bootstrap_servers}); "
        f"it may write {', '.join(answer.topics) or 'no topic yet'}. Its password (shown only "
        f"now):\n{answer.password}\nTo send as it: KEYSTONE_KAFKA_SASL_USERNAME={answer.username} "
        "KEYSTONE_KAFKA_SASL_PASSWORD_FILE=<a file holding it> keystone send STREAM "
        f"--direct {name}"
    )


@app.command("delete")
def app_delete(ctx: typer.Context, name: str, as_json: JsonOption = False) -> None:
    """Revoke an app: its key stops working and it leaves every stream's producers."""
    with control(ctx) as client:
        client.delete_app(name)
    done({"app": name, "deleted": True}, as_json, f"app [bold]{name}[/] revoked")
