"""`keystone demo`: a demo stream with one output per sink type, provisioned through control,
a burst of events through the proxy, and what each sink received, read back by guid.

Idempotent: a second run applies the same specs, gives the demo app a new key (keys are shown
only once) and counts only its own events.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from keystone import terminal
from keystone.contracts.settings import Settings
from keystone.contracts.spec import OutputSpec, StreamSpec
from keystone.control.client import ControlClient
from keystone.ingest_proxy.client import ProxyClient
from keystone.loadtest.events import EventMaker
from keystone.loadtest.run import app_key, await_key, await_routers
from keystone.router.lang.evaluate import matches
from keystone.router.lang.parser import parse_filter
from keystone.router.sinks.readback import SinkReader, reader_for
from keystone.router.spark import spark_session

STREAM, ALERTS, OWNER, APP = "demo", "demo_alerts", "demo", "demo-app"
EVENTS = 2000
WAIT_SECONDS = 300
OUTPUTS = [
    {"name": "errors", "filter": "level = 'error'", "sink": {"type": "kafka"}},
    {  # the same, exactly once: after a crash, errors may repeat records, this never does
        "name": "errors_once",
        "filter": "level = 'error'",
        "sink": {"type": "kafka"},
        "delivery": {"mode": "microbatch", "trigger": "5 seconds", "guarantee": "exactly_once"},
    },
    {
        "name": "search",
        "filter": "country in ('US', 'CA') and device.type != 'test'",
        "projection": ["guid", "timestamp", "title", "user.id as user_id", "country", "event"],
        "sink": {"type": "elasticsearch"},
    },
    {
        "name": "warehouse",
        "sink": {"type": "hive"},
        "delivery": {"mode": "microbatch", "trigger": "10 seconds"},
    },
    {
        "name": "alerts",
        "filter": "level = 'error' and event = 'error'",
        "projection": ["guid", "title", "device.type as device", "country"],
        "sink": {"type": "keystone", "stream": ALERTS},
    },
]


@dataclass
class Check:
    output: OutputSpec
    reader: SinkReader
    expected: set[str]
    received: int = 0
    duplicates: int = 0

    def read(self) -> None:
        copies = self.reader.copies()
        self.received = sum(1 for g in self.expected if g in copies)
        self.duplicates = sum(copies[g] - 1 for g in self.expected if g in copies)


def run(settings: Settings, console: Console) -> list[dict]:
    """Runs the demo; what each output should have received and did, one dict per output."""
    with ControlClient.from_settings(settings) as control:
        spec = provision(control, console)
        key = app_key(control, APP, STREAM)
        await_routers(control, [STREAM], console)
    await_key(settings.proxy_url, key, STREAM)
    spark = spark_session(settings, "keystone-demo", quiet=True)
    try:
        maker = EventMaker(seed=int(time.time()), size=512)
        events = [maker(n) for n in range(EVENTS)]
        with ProxyClient(settings.proxy_url, key) as proxy:
            guids = proxy.send(STREAM, events).guids
        console.print(f"sent {len(guids):,} events to [bold]{STREAM}[/] through the proxy")
        sent = dict(zip(guids, events, strict=True))
        checks = [
            Check(o, reader_for(settings, spec, o, spark), _matching(o, sent)) for o in spec.outputs
        ]
        _await_sinks(checks, console)
    finally:
        spark.stop()
    _report(settings, checks, console)
    return [
        {
            "output": c.output.name,
            "sink": c.output.sink.type,
            "guarantee": c.output.guarantee,
            "where": c.reader.where,
            "expected": len(c.expected),
            "received": c.received,
            "duplicates": c.duplicates,
        }
        for c in checks
    ]


def provision(control: ControlClient, console: Console) -> StreamSpec:
    """The demo streams, applied (idempotent); the demo stream's spec as stored."""
    alerts = {"name": ALERTS, "owner": OWNER, "partitions": 2}
    demo = {"name": STREAM, "owner": OWNER, "partitions": 4, "producers": [], "outputs": OUTPUTS}
    control.put_stream(alerts)
    answer = control.put_stream(demo)
    made = ", ".join(answer.provisioned) or "nothing new"
    console.print(f"streams [bold]{STREAM}[/] and [bold]{ALERTS}[/] applied; provisioned: {made}")
    return answer.spec


def _matching(output: OutputSpec, sent: dict[str, dict]) -> set[str]:
    expr = parse_filter(output.filter) if output.filter else None
    return {g for g, event in sent.items() if matches(expr, event, {"guid": g})}


def _await_sinks(checks: list[Check], console: Console) -> None:
    columns = (
        TextColumn("{task.description:<28}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    deadline = time.monotonic() + WAIT_SECONDS
    with Progress(*columns, console=console) as progress:
        tasks = {
            id(c): progress.add_task(
                f"{c.output.name} ({c.output.sink.type})", total=len(c.expected)
            )
            for c in checks
        }
        while True:
            for check in checks:
                check.read()
                progress.update(tasks[id(check)], completed=check.received)
            done = all(c.received >= len(c.expected) for c in checks)
            if done or time.monotonic() > deadline:
                return
            time.sleep(2)


def _report(settings: Settings, checks: list[Check], console: Console) -> None:
    table = terminal.table("output", "sink", "guarantee", "where", "expected", "received", "dups")
    for c in checks:
        style = "green" if c.received == len(c.expected) else "red"
        table.add_row(
            c.output.name,
            c.output.sink.type,
            c.output.guarantee.replace("_", " "),
            c.reader.where,
            f"{len(c.expected):,}",
            f"[{style}]{c.received:,}[/]",
            f"{c.duplicates:,}",
        )
    console.print(table)
    ui = settings.control_url
    console.print(
        "Where to look:\n"
        f"  web UI      {ui}/ui/streams/{STREAM}  (sign in with the admin token in "
        f"{settings.admin_token_file})\n"
        f"  dashboard   {ui}/ui/streams/{STREAM}/dashboard\n"
        f"  status      keystone stream show {STREAM}\n"
        f'  Hive        keystone sql "SELECT * FROM keystone.{STREAM}__warehouse LIMIT 10"\n'
        f"  search      {settings.elasticsearch_url}/{STREAM}-search-*/_search?q=country:US\n"
        f"  Prometheus  {settings.prometheus_url}/graph"
    )
