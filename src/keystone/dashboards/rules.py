"""A stream's Prometheus recording and alerting rules: router down, lag growing for minutes,
dead letters appearing, delivery rate under the stream's objective, ingest rejects spiking, and
where an output is exactly once, its transactions aborting again and again. One rule group per
stream, named `keystone-stream-<name>`; every alert carries `stream` and `owner`, which
Alertmanager routes by (`keystone.alerts.config`)."""

from __future__ import annotations

from typing import Any

import yaml

from keystone.contracts import metrics as m
from keystone.contracts.spec import StreamSpec

GROUP_PREFIX = "keystone-stream-"
RECORDED_RATE = "keystone:stream_router_events:rate1m"
RECORDED_DELIVERY = "keystone:stream_delivery_rate:ratio5m"
RECORDED_P99 = "keystone:stream_delivery_latency_seconds:p99_5m"
RECORDED_INGEST = "keystone:stream_ingest_events:rate5m"
# One aborted batch is a crash or a broker's restart, retried; this many in 10 minutes is an
# output that cannot commit.
ABORTS_TO_ALERT = 3
TRANSACTIONS_ABORTING = "KeystoneTransactionsAborting"
ROUTER_DOWN = "KeystoneRouterDown"
LAG_GROWING = "KeystoneLagGrowing"
DEAD_LETTERS = "KeystoneDeadLetters"
DELIVERY_RATE_LOW = "KeystoneDeliveryRateLow"
INGEST_REJECTS_SPIKING = "KeystoneIngestRejectsSpiking"
# Every alert a stream's rules may hold (an owner silences them by name).
ALERTS = (
    TRANSACTIONS_ABORTING,
    ROUTER_DOWN,
    LAG_GROWING,
    DEAD_LETTERS,
    DELIVERY_RATE_LOW,
    INGEST_REJECTS_SPIKING,
)


def group_name(stream: str) -> str:
    return f"{GROUP_PREFIX}{stream}"


def rules(spec: StreamSpec, dashboard_url: str) -> dict[str, Any]:
    s = spec.name
    sel = f'stream="{s}"'
    events = m.ROUTER_EVENTS
    objective = spec.objectives

    def alert(name: str, expr: str, wait: str, severity: str, summary: str, text: str) -> dict:
        return {
            "alert": name,
            "expr": expr,
            "for": wait,
            "labels": {"severity": severity, "stream": s, "owner": spec.owner},
            "annotations": {"summary": summary, "description": text, "dashboard": dashboard_url},
        }

    aborting = alert(
        TRANSACTIONS_ABORTING,
        f"sum by (stream, output) (increase({m.ROUTER_TRANSACTIONS}"
        f'{{{sel},outcome="aborted"}}[10m])) >= {ABORTS_TO_ALERT}',
        "0m",
        "warning",
        f"Exactly-once output {{{{ $labels.output }}}} of stream {s} keeps aborting",
        "{{ $value | humanize }} of its batches' transactions aborted in 10 minutes: each is "
        "run again, so nothing is lost or repeated, but the output is not moving. The "
        f"router's log says why (`keystone stream show {s}` gives its last error).",
    )
    return {
        "groups": [
            {
                "name": group_name(s),
                "rules": [
                    {
                        "record": RECORDED_RATE,
                        "expr": f"sum by (stream, output, stage) (rate({events}{{{sel}}}[1m]))",
                    },
                    {
                        "record": RECORDED_DELIVERY,
                        "expr": f'sum by (stream, output) (rate({events}{{{sel},stage="delivered"}}'
                        f"[5m])) / sum by (stream, output) (rate({events}"
                        f'{{{sel},stage="matched"}}[5m]))',
                    },
                    {
                        "record": RECORDED_P99,
                        "expr": "histogram_quantile(0.99, sum by (stream, output, le) (rate("
                        f"{m.DELIVERY_LATENCY_SECONDS}_bucket{{{sel}}}[5m])))",
                    },
                    {
                        "record": RECORDED_INGEST,
                        "expr": f"sum by (stream, result) (rate({m.INGEST_EVENTS}{{{sel}}}[5m]))",
                    },
                    alert(
                        ROUTER_DOWN,
                        f'max(up{{job="keystone_router",{sel}}}) < 1 '
                        f"or max({m.ROUTER_UP}{{{sel}}}) < 1",
                        f"{objective.router_down_seconds}s",
                        "critical",
                        f"The router of stream {s} is down",
                        "Prometheus cannot reach it, or one of its queries is not running "
                        f"({m.ROUTER_QUERY_UP} says which): what it does not deliver waits in "
                        f"Kafka meanwhile. See `keystone stream show {s}` for its state and last "
                        "error.",
                    ),
                    alert(
                        LAG_GROWING,
                        f"{m.ROUTER_LAG}{{{sel}}} > {objective.lag_records} "
                        f"and deriv({m.ROUTER_LAG}{{{sel}}}[5m]) > 0",
                        "5m",
                        "warning",
                        f"Output {{{{ $labels.output }}}} of stream {s} is falling behind",
                        "{{ $value | humanize }} records behind the fronting topic and growing "
                        "for 5 minutes: its sink is slow or away.",
                    ),
                    alert(
                        DEAD_LETTERS,
                        f"sum by (stream, output) (increase({events}"
                        f'{{{sel},stage="dead_letter"}}[5m])) > 0',
                        "0m",
                        "warning",
                        f"Dead letters in stream {s} ({{{{ $labels.output }}}})",
                        "{{ $value | humanize }} events in 5 minutes went to the dead-letter "
                        f"topic keystone.{s}.dlq; their ks_dlq_reason header says why.",
                    ),
                    alert(
                        DELIVERY_RATE_LOW,
                        f"{RECORDED_DELIVERY}{{{sel}}} < {objective.delivery_rate}",
                        "10m",
                        "critical",
                        f"Output {{{{ $labels.output }}}} of stream {s} delivers under its "
                        "objective",
                        "{{ $value | humanizePercentage }} of matched events delivered over 5 "
                        f"minutes; the objective is {objective.delivery_rate:.4%}.",
                    ),
                    alert(
                        INGEST_REJECTS_SPIKING,
                        f'sum by (stream) ({RECORDED_INGEST}{{{sel},result=~"rejected|failed"}})'
                        f" > 1 and sum by (stream) ({RECORDED_INGEST}"
                        f'{{{sel},result=~"rejected|failed"}}) / sum by (stream) '
                        f"({RECORDED_INGEST}{{{sel}}}) > 0.05",
                        "5m",
                        "warning",
                        f"The proxy refuses many events of stream {s}",
                        "{{ $value | humanizePercentage }} of the events posted are refused or "
                        "failed: look at keystone_ingest_events_total by app and result.",
                    ),
                    *([aborting] if any(o.transactional for o in spec.outputs) else []),
                ],
            }
        ]
    }


def rules_yaml(spec: StreamSpec, dashboard_url: str) -> str:
    return yaml.safe_dump(rules(spec, dashboard_url), sort_keys=False, width=1000)
