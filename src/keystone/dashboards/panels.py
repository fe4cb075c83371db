"""The panels of a stream's dashboard and of the fleet overview, defined once: the Grafana
generator turns them into a dashboard model, the live pages draw them from Prometheus.

Every expression is built here from validated names (stream and output names cannot hold a
quote), never from user text."""

from __future__ import annotations

from dataclasses import dataclass

from keystone.contracts import metrics as m
from keystone.contracts.spec import StreamSpec

RATE = "1m"  # window of the rate panels
SLOW = "5m"  # window of the latency and delivery-rate panels


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str  # Grafana's legendFormat: "{{label}}" pieces and text


@dataclass(frozen=True)
class Panel:
    key: str  # stable, for the live page and tests
    title: str
    unit: str  # Grafana's unit id; the live page formats the same ones
    queries: tuple[Query, ...]
    description: str
    width: int = 12  # of Grafana's 24 columns


UNITS = {  # Grafana unit -> what the live page writes after a number
    "suffix: events/s": "events/s",
    "s": "s",
    "short": "",
    "percentunit": "%",
    "none": "",
}


def _selector(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def stream_panels(spec: StreamSpec) -> list[Panel]:
    s = spec.name
    ingest = f"{m.INGEST_EVENTS}{_selector(stream=s)}"
    accepted = f"{m.INGEST_EVENTS}{_selector(stream=s, result='accepted')}"
    events = m.ROUTER_EVENTS
    buckets = f"{m.DELIVERY_LATENCY_SECONDS}_bucket{_selector(stream=s)}"
    panels = [
        Panel(
            "ingest-by-app",
            "Ingest rate by app",
            "suffix: events/s",
            (Query(f"sum by (app) (rate({accepted}[{RATE}]))", "{{app}}"),),
            "Events the proxy accepted (in Kafka before its 202), per producing app.",
        ),
        Panel(
            "ingest-results",
            "Accepted vs rejected",
            "suffix: events/s",
            (Query(f"sum by (result) (rate({ingest}[{RATE}]))", "{{result}}"),),
            "accepted: in Kafka; rejected: refused (4xx); failed: Kafka away (503).",
        ),
    ]
    for output in spec.outputs:
        selector = _selector(stream=s, output=output.name)
        panels.append(
            Panel(
                f"output-{output.name}",
                f"Output {output.name} ({output.sink.type}, {output.guarantee.replace('_', ' ')})",
                "suffix: events/s",
                (Query(f"sum by (stage) (rate({events}{selector}[{RATE}]))", "{{stage}}"),),
                "in: read from the fronting topic; matched: kept by the filter; delivered: "
                "acknowledged by the sink (Kafka and Keystone: handed to Spark's Kafka writer, "
                "whose failure replays them, or when exactly once, committed in a transaction); "
                "dead_letter: refused for good (dead-letter topic).",
                width=8,
            )
        )
    panels += [
        Panel(
            "lag",
            "Consumer lag",
            "short",
            (Query(f"max by (output) ({m.ROUTER_LAG}{_selector(stream=s)})", "{{output}}"),),
            "Records between each output's position and the fronting topic's end.",
        ),
        Panel(
            "latency",
            "Delivery latency p50 and p99",
            "s",
            tuple(
                Query(
                    f"histogram_quantile({q}, sum by (output, le) (rate({buckets}[{SLOW}])))",
                    f"{{{{output}}}} p{int(q * 100)}",
                )
                for q in (0.5, 0.99)
            ),
            "Sink time minus ingest time (ks_ts).",
        ),
        Panel(
            "delivery-rate",
            "Delivery rate (delivered / matched)",
            "percentunit",
            (
                Query(
                    f"sum by (output) (rate({events}{_selector(stream=s, stage='delivered')}"
                    f"[{SLOW}])) / sum by (output) (rate({events}"
                    f"{_selector(stream=s, stage='matched')}[{SLOW}]))",
                    "{{output}}",
                ),
            ),
            f"Objective: {spec.objectives.delivery_rate:.4%} per output.",
        ),
        Panel(
            "router-up",
            "Router up",
            "none",
            (
                Query(f"max({m.ROUTER_UP}{_selector(stream=s)})", "every query running"),
                Query(f"max(up{_selector(job='keystone_router', stream=s)})", "scraped"),
            ),
            "1 while the stream's router runs its queries and Prometheus reaches it.",
        ),
    ]
    if any(o.transactional for o in spec.outputs):
        transactions = f"{m.ROUTER_TRANSACTIONS}{_selector(stream=s)}"
        panels.append(
            Panel(
                "transactions",
                "Transactions of the exactly-once outputs",
                "short",
                (
                    Query(
                        f"sum by (output, outcome) (increase({transactions}[{RATE}]))",
                        "{{output}} {{outcome}}",
                    ),
                ),
                f"Kafka transactions per {RATE}: committed (one per input partition of a batch "
                "that had records to write), aborted (a batch's attempt that failed: it is run "
                "again and writes only what no transaction committed).",
            )
        )
    return panels


def fleet_panels(streams: list[str] | None) -> list[Panel]:
    """The overview of several streams: every stream's (None, the admin's view) or these."""
    if streams is not None and not streams:
        return []
    scope = "" if streams is None else f'stream=~"{"|".join(sorted(streams))}",'
    events = m.ROUTER_EVENTS

    def by_stream(key: str, title: str, series: str, description: str) -> Panel:
        return Panel(
            key,
            title,
            "suffix: events/s",
            (Query(f"sum by (stream) (rate({series.format(scope=scope)}[{RATE}]))", "{{stream}}"),),
            description,
        )

    panels = [
        by_stream(
            "fleet-ingest",
            "Ingest rate by stream",
            m.INGEST_EVENTS + '{{{scope}result="accepted"}}',
            "Events the proxy accepted, per stream.",
        ),
        by_stream(
            "fleet-delivered",
            "Delivered by stream",
            events + '{{{scope}stage="delivered"}}',
            "Events the sinks acknowledged, over all of each stream's outputs.",
        ),
        by_stream(
            "fleet-dead-letters",
            "Dead letters by stream",
            events + '{{{scope}stage="dead_letter"}}',
            "Events no output could deliver, in each stream's dead-letter topic.",
        ),
    ]
    if streams is None:  # the fleet as a whole is the admin's to see
        panels.append(
            Panel(
                "fleet-routers",
                "Routers by state",
                "short",
                (Query(f"sum by (state) ({m.CONTROL_ROUTERS})", "{{state}}"),),
                "The fleet's routers: running, starting, restarting, failed...",
            )
        )
    return panels
