"""`keystone owner create | list | rotate | delete`: owners and their tokens (the admin's)."""

from __future__ import annotations

import typer

from keystone.cli.common import JsonOption, control, done, show_secret
from keystone.contracts.registry import check_label

app = typer.Typer(help="Owners and their tokens (the admin's).", no_args_is_help=True)


@app.command("create")
def owner_create(ctx: typer.Context, name: str, as_json: JsonOption = False) -> None:
    """Register an owner; their token is shown once and stored only hashed."""
    check_label(name, "owner")
    with control(ctx) as client:
        answer = client.create_owner(name)
    show_secret(answer, as_json, f"owner [bold]{name}[/] created; their token")


@app.command("list")
def owner_list(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Every owner (the admin's)."""
    with control(ctx) as client:
        found = client.owners()
    done(found, as_json, "\n".join(found) or "no owners")


@app.command("rotate")
def owner_rotate(ctx: typer.Context, name: str, as_json: JsonOption = False) -> None:
    """Give an owner a new token; the old one stops working at once."""
    with control(ctx) as client:
        answer = client.rotate_owner(name)
    show_secret(answer, as_json, f"owner [bold]{name}[/]'s new token")


@app.command("delete")
def owner_delete(ctx: typer.Context, name: str, as_json: JsonOption = False) -> None:
    """Remove an owner: their token stops working; their streams stay, the admin's to manage."""
    with control(ctx) as client:
        client.delete_owner(name)
    done({"owner": name, "deleted": True}, as_json, f"owner [bold]{name}[/] removed")
