"""The `keystone` command: the stack, and the control API's streams, outputs, apps, owners,
previews and audit log, with readable tables or `--json` for scripts. Errors the project raises
on purpose (KeystoneError) become one clear line on stderr and exit code 1, here and nowhere
else.

Specs are checked here first (without I/O: the same checks control runs), so a typo is caught
before anything is sent; control checks everything again and owns the decision.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table
from rich.text import Text

from keystone.contracts.errors import InvalidSpec, KeystoneError
from keystone.contracts.registry import check_label
from keystone.contracts.settings import Settings
from keystone.contracts.spec import OutputSpec, field_errors, load_spec
from keystone.control.client import ControlClient
from keystone.control.validation import check_spec
from keystone.ingest_proxy import cli as proxy_cli
from keystone.stack import cli as stack_cli

app = typer.Typer(
    help="Keystone: a multi-tenant event router on Apache Spark.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
streams = typer.Typer(help="Streams: their specs, routers and status.", no_args_is_help=True)
outputs = typer.Typer(help="A stream's outputs: filter, projection, sink.", no_args_is_help=True)
apps = typer.Typer(
    help="Producing apps, their keys and the streams they may post to.", no_args_is_help=True
)
owners = typer.Typer(help="Owners and their tokens (the admin's).", no_args_is_help=True)
app.add_typer(stack_cli.app, name="stack")
app.add_typer(streams, name="stream")
app.add_typer(outputs, name="output")
app.add_typer(apps, name="app")
app.add_typer(owners, name="owner")
app.command()(stack_cli.sql)
app.command()(proxy_cli.send)
console = Console()
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
SpecFile = Annotated[typer.FileText, typer.Option("-f", "--file", help="YAML or JSON; - for stdin")]
STATE_STYLE = {"running": "green", "restarting": "red", "failed": "red", "none": "dim"}


@app.callback()
def _settings(ctx: typer.Context) -> None:
    """Settings come from KEYSTONE_* environment variables, a .env file, or defaults."""
    ctx.obj = Settings()


@contextmanager
def control(ctx: typer.Context) -> Iterator[ControlClient]:
    with ControlClient.from_settings(ctx.obj) as client:
        yield client


def emit(data: Any) -> None:
    print(json.dumps(data, indent=2))


def done(answer: Any, as_json: bool, message: str) -> None:
    """What a change command prints: control's answer as JSON, or one sentence."""
    if as_json:
        emit(answer)
    else:
        console.print(message)


def _state(router: dict) -> str:
    state = router["state"]
    return f"[{STATE_STYLE.get(state, 'yellow')}]{state}[/]"


# Streams


def _checked_spec(text: str) -> dict:
    spec = load_spec(text)
    check_spec(spec, Settings())  # the limits configured here; control checks with its own
    return json.loads(spec.to_json())


@streams.command("create")
def stream_create(ctx: typer.Context, file: SpecFile, as_json: JsonOption = False) -> None:
    """Create a stream from its spec: checked, provisioned, and its router deployed."""
    spec = _checked_spec(file.read())
    with control(ctx) as client:
        _report_change(client.create_stream(spec), "created", as_json)


@streams.command("apply")
def stream_apply(ctx: typer.Context, file: SpecFile, as_json: JsonOption = False) -> None:
    """Create a stream or replace its spec (its router is redeployed when it changed)."""
    spec = _checked_spec(file.read())
    with control(ctx) as client:
        _report_change(client.put_stream(spec), "applied", as_json)


def _report_change(answer: dict, verb: str, as_json: bool) -> None:
    if as_json:
        emit(answer)
        return
    made = ", ".join(answer["provisioned"]) or "nothing new"
    console.print(f"stream [bold]{answer['spec']['name']}[/] {verb}; provisioned: {made}")


@streams.command("list")
def stream_list(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """The streams you own (every stream, for the admin)."""
    with control(ctx) as client:
        found = client.streams()
    if as_json:
        emit(found)
        return
    table = Table("stream", "owner", "partitions", "producers", "outputs", "router")
    for s in found:
        spec = s["spec"]
        table.add_row(
            spec["name"],
            spec["owner"],
            str(spec["partitions"]),
            ", ".join(spec["producers"]),
            ", ".join(f"{o['name']} ({o['sink']['type']})" for o in spec["outputs"]),
            _state(s["router"]),
        )
    console.print(table)


@streams.command("show")
def stream_show(ctx: typer.Context, name: str, as_json: JsonOption = False) -> None:
    """A stream's spec, its router and, per output, rates, lag and latency."""
    with control(ctx) as client:
        stream = client.stream(name)
        status = client.status(name)
    if as_json:
        emit({**stream, "status": status})
        return
    console.print(Text(yaml.safe_dump(stream["spec"], sort_keys=False).rstrip()))
    router = status["router"]
    line = f"router: {_state(router)}"
    if router.get("pid"):
        line += f"  pid {router['pid']}  for {router['for_seconds']:.0f} s"
    if router.get("restarts"):
        line += f"  {router['restarts']} restarts"
    console.print(line)
    if router.get("last_error"):
        console.print(Text(f"last error: {router['last_error']}", style="red"))
    if status.get("metrics_error"):
        console.print(Text(f"rates unavailable: {status['metrics_error']}", style="yellow"))
    table = Table(
        "output",
        "sink",
        "in/s",
        "matched/s",
        "delivered/s",
        "delivered",
        "dead letters",
        "lag",
        "p99",
    )
    for o in status["outputs"]:
        rates, totals = o["rates"], o["totals"]
        table.add_row(
            o["name"],
            o["sink"],
            *(f"{rates.get(s, 0):.1f}" for s in ("in", "matched", "delivered")),
            f"{totals.get('delivered', 0):.0f}",
            f"{totals.get('dead_letter', 0):.0f}",
            "-" if o["lag"] is None else f"{o['lag']:.0f}",
            "-" if o["latency_p99"] is None else f"{o['latency_p99'] * 1000:.0f} ms",
        )
    console.print(table)


@streams.command("delete")
def stream_delete(ctx: typer.Context, name: str, as_json: JsonOption = False) -> None:
    """Stop a stream's router and forget the stream (its topics, tables and indices stay)."""
    with control(ctx) as client:
        client.delete_stream(name)
    done(
        {"stream": name, "deleted": True},
        as_json,
        f"stream [bold]{name}[/] deleted; its router is stopping",
    )


# Outputs


@outputs.command("set")
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


@outputs.command("delete")
def output_delete(
    ctx: typer.Context, stream: str, output: str, as_json: JsonOption = False
) -> None:
    """Remove an output from a stream."""
    with control(ctx) as client:
        answer = client.delete_output(stream, output)
    done(answer, as_json, f"output [bold]{stream}.{output}[/] removed")


@app.command()
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
    for item in result["records"]:
        when = time.strftime("%H:%M:%S", time.gmtime(item["timestamp"] / 1000))
        table.add_row(item["guid"], when, Text(json.dumps(item["record"])))
    console.print(table)
    console.print(
        f"{result['matched']} of the last {result['scanned']} events match"
        + (f"; {result['unreadable']} unreadable (dead letters)" if result["unreadable"] else "")
    )


# Apps


@apps.command("create")
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
    if as_json:
        print(json.dumps(answer))
    else:
        console.print(f"app [bold]{name}[/] created; its key (shown only now):\n{answer['key']}")


@apps.command("list")
def app_list(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Your apps and the streams each may post to."""
    with control(ctx) as client:
        found = client.apps()
    if as_json:
        emit(found)
        return
    table = Table("app", "owner", "quota (events/s)", "streams")
    for a in found:
        table.add_row(a["name"], a["owner"], str(a["rate"] or "none"), ", ".join(a["streams"]))
    console.print(table)


@apps.command("grant")
def app_grant(ctx: typer.Context, app_name: str, stream: str, as_json: JsonOption = False) -> None:
    """Let an app post events to a stream of yours."""
    with control(ctx) as client:
        answer = client.grant(stream, app_name)
    done(answer, as_json, f"app [bold]{app_name}[/] may now post to [bold]{stream}[/]")


@apps.command("ungrant")
def app_ungrant(
    ctx: typer.Context, app_name: str, stream: str, as_json: JsonOption = False
) -> None:
    """Take back an app's right to post to a stream."""
    with control(ctx) as client:
        answer = client.revoke(stream, app_name)
    done(answer, as_json, f"app [bold]{app_name}[/] may no longer post to [bold]{stream}[/]")


@apps.command("rotate")
def app_rotate(ctx: typer.Context, name: str, as_json: JsonOption = False) -> None:
    """Give an app a new key; the old one stops working within a second."""
    with control(ctx) as client:
        answer = client.rotate_app(name)
    if as_json:
        print(json.dumps(answer))
    else:
        console.print(f"app [bold]{name}[/]'s new key (shown only now):\n{answer['key']}")


@apps.command("delete")
def app_delete(ctx: typer.Context, name: str, as_json: JsonOption = False) -> None:
    """Revoke an app: its key stops working and it leaves every stream's producers."""
    with control(ctx) as client:
        client.delete_app(name)
    done({"app": name, "deleted": True}, as_json, f"app [bold]{name}[/] revoked")


# Owners


@owners.command("create")
def owner_create(ctx: typer.Context, name: str, as_json: JsonOption = False) -> None:
    """Register an owner; their token is shown once and stored only hashed."""
    check_label(name, "owner")
    with control(ctx) as client:
        answer = client.create_owner(name)
    if as_json:
        print(json.dumps(answer))
    else:
        console.print(
            f"owner [bold]{name}[/] created; their token (shown only now):\n{answer['token']}"
        )


@owners.command("list")
def owner_list(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Every owner (the admin's)."""
    with control(ctx) as client:
        found = client.owners()
    done(found, as_json, "\n".join(found) or "no owners")


@owners.command("rotate")
def owner_rotate(ctx: typer.Context, name: str, as_json: JsonOption = False) -> None:
    """Give an owner a new token; the old one stops working at once."""
    with control(ctx) as client:
        answer = client.rotate_owner(name)
    if as_json:
        print(json.dumps(answer))
    else:
        console.print(f"owner [bold]{name}[/]'s new token (shown only now):\n{answer['token']}")


@owners.command("delete")
def owner_delete(ctx: typer.Context, name: str, as_json: JsonOption = False) -> None:
    """Remove an owner: their token stops working; their streams stay, the admin's to manage."""
    with control(ctx) as client:
        client.delete_owner(name)
    done({"owner": name, "deleted": True}, as_json, f"owner [bold]{name}[/] removed")


@app.command()
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
    table = Table("when (UTC)", "who", "action", "target", "detail")
    for e in entries:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e["at"]))
        detail = ", ".join(f"{k}={v}" for k, v in e["detail"].items() if v)
        table.add_row(when, e["who"], e["action"], e["target"], Text(detail))
    console.print(table)


@app.command()
def dashboard(
    ctx: typer.Context,
    stream: str,
    png: Annotated[
        Path | None, typer.Option("--png", help="Draw the page into this PNG file.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """The address of a stream's live dashboard, or (--png) the dashboard as an image."""
    from keystone.dashboards.render import render_png  # a browser only for this command

    settings: Settings = ctx.obj
    with control(ctx) as client:
        client.stream(stream)  # it exists, and it is yours
        token = client.token
    url = f"{settings.control_url}/ui/streams/{stream}/dashboard"
    if png is not None:
        render_png(url, token, png)
    done(
        {"stream": stream, "url": url, "png": str(png) if png else None},
        as_json,
        url if png is None else f"{url} drawn into {png}",
    )


def seconds(text: str) -> float:
    """'90', '90s', '10m' or '1h' as seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    try:
        value = float(number) * units[unit]
    except ValueError as e:
        raise typer.BadParameter(f"{text!r}: a duration like 90, 90s, 10m or 1h") from e
    if value <= 0:
        raise typer.BadParameter(f"{text!r}: a duration above zero")
    return value


@app.command()
def loadtest(
    ctx: typer.Context,
    stream: Annotated[str, typer.Option(help="The stream to load (it must have outputs).")],
    rate: Annotated[float, typer.Option(min=1, help="Events per second, all producers.")] = 500,
    duration: Annotated[str, typer.Option(help="How long: 90, 90s, 10m, 1h.")] = "60s",
    event_size: Annotated[int, typer.Option(min=200, max=1_000_000)] = 1024,
    producers: Annotated[int, typer.Option(min=1, max=64)] = 4,
    direct: Annotated[
        str | None, typer.Option(help="Write straight to Kafka as this app, not via the proxy.")
    ] = None,
    fault: Annotated[
        list[str] | None,
        typer.Option(
            help="NAME\\[@AT]\\[+FOR]: kill-router, restart-kafka, stop-elasticsearch, "
            "stop-control; at AT s (default a third in), for FOR s. Repeatable."
        ),
    ] = None,
    report: Annotated[Path | None, typer.Option(help="Report folder.")] = None,
    drain_timeout: Annotated[
        float, typer.Option(help="Seconds to wait for every sink to hold every event.")
    ] = 300,
    key: Annotated[
        str | None, typer.Option(help="App key to post with; default: the loadtest app's.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Drive a stream at a set rate, inject faults, audit every acknowledged guid at every
    sink, and report delivery rate, throughput and latency (exit 1 on any loss)."""
    from keystone.loadtest.driver import Plan  # the load test's libraries only for this command
    from keystone.loadtest.faults import Fault
    from keystone.loadtest.run import Options, run

    length = seconds(duration)
    options = Options(
        plan=Plan(stream, rate, length, event_size, producers),
        faults=[Fault.parse(f, length) for f in fault or []],
        direct=direct,
        key=key,
        report=report,
        drain_timeout=drain_timeout,
    )
    figures = run(ctx.obj, options, Console(stderr=True) if as_json else console)
    if as_json:
        emit({k: v for k, v in figures.items() if k not in ("producers_per_second", "sinks")})
    audit = figures["audit"]
    if not (audit["lossless"] and audit["drained"]):
        raise typer.Exit(1)


@app.command()
def demo(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Provision a demo stream with one output per sink type, send a burst of events through
    the proxy, and show what each sink received (the stack must be up)."""
    from keystone.loadtest.demo import run  # Spark and the readers only for this command

    quiet = Console(stderr=True)  # progress to stderr, so --json leaves stdout to the figures
    results = run(ctx.obj, quiet if as_json else console)
    if as_json:
        emit(results)
    if any(r["received"] != r["expected"] for r in results):
        raise typer.Exit(1)


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
