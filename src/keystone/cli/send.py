"""`keystone send`: post events to a stream from a file or stdin with the producer wrapper."""

from __future__ import annotations

import json
import os
from typing import Annotated

import typer

from keystone.contracts.errors import BadRequest
from keystone.ingest_proxy.client import ProxyClient, direct_producer


def _events(text: str) -> list[bytes]:
    """A JSON array, or one JSON object per line (NDJSON)."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            return [json.dumps(e).encode() for e in json.loads(stripped)]
        except json.JSONDecodeError as e:
            raise BadRequest(f"the input is not a JSON array: {e}") from e
    return [line.encode() for line in text.splitlines() if line.strip()]


def send(
    ctx: typer.Context,
    stream: str,
    source: Annotated[
        typer.FileText, typer.Argument(help="NDJSON or JSON-array file; - for stdin")
    ] = "-",
    key: Annotated[str | None, typer.Option(help="App key; default $KEYSTONE_APP_KEY")] = None,
    partition_key: Annotated[
        str | None, typer.Option(help="Field path of the partition key")
    ] = None,
    batch_size: Annotated[int, typer.Option(min=1, max=10000)] = 100,
    direct: Annotated[
        str | None, typer.Option(help="Skip HTTP: write to Kafka as this app")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the guids as JSON.")] = False,
) -> None:
    """Send events to a stream through the proxy (or straight to Kafka with --direct APP)."""
    events = _events(source.read())
    if direct:
        producer = direct_producer(ctx.obj, direct, max_event_bytes=ctx.obj.max_event_bytes)
        result = producer.send(stream, events)
    else:
        app_key = key or os.environ.get("KEYSTONE_APP_KEY")
        if not app_key:
            raise BadRequest("an app key is needed: --key or KEYSTONE_APP_KEY")
        with ProxyClient(ctx.obj.proxy_url, app_key, batch_size=batch_size) as client:
            result = client.send(stream, events, key=partition_key)
    if as_json:
        print(json.dumps({"stream": stream, "count": len(result.guids), "guids": result.guids}))
    else:
        typer.echo(f"sent {len(result.guids)} events to {stream} ({result.retries} retries)")
