"""A stream's status: its router as the fleet sees it, and per output its rates, lag and
latency as Prometheus has scraped them from the router."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from keystone.contracts import metrics as names
from keystone.contracts.registry import RouterPhase, RouterState
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.dashboards.prometheus import PrometheusError, instant

RATE_WINDOW = "1m"


@dataclass
class OutputStatus:
    name: str
    sink: str
    rates: dict[str, float] = field(default_factory=dict)  # events/s per stage
    totals: dict[str, float] = field(default_factory=dict)  # events per stage since it started
    lag: float | None = None  # records behind the fronting topic's end
    latency_p99: float | None = None  # seconds


@dataclass
class StreamStatus:
    stream: str
    router: dict[str, Any]
    outputs: list[OutputStatus]
    metrics_error: str | None = None  # why rates are missing, when they are

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def router_summary(state: RouterState | None, has_outputs: bool) -> dict[str, Any]:
    if state is None:
        return {"state": RouterPhase.PENDING if has_outputs else RouterPhase.NONE}
    now = time.time()
    summary: dict[str, Any] = {
        "state": state.state,
        "pid": state.pid or None,
        "for_seconds": round(now - state.since, 1) if state.since else None,
        "restarts": state.restarts,
        "last_error": state.last_error or None,
    }
    if state.state in (RouterPhase.RESTARTING, RouterPhase.FAILED):
        summary["retry_in_seconds"] = max(0.0, round(state.retry_at - now, 1))
    return summary


def stream_status(settings: Settings, spec: StreamSpec, state: RouterState | None) -> StreamStatus:
    outputs = {o.name: OutputStatus(o.name, o.sink.type) for o in spec.outputs}
    status = StreamStatus(
        spec.name, router_summary(state, bool(spec.outputs)), list(outputs.values())
    )
    if not outputs:
        return status
    selector = f'stream="{spec.name}"'  # a validated name: safe inside PromQL
    queries = {
        "rates": "sum by (output, stage) "
        f"(rate({names.ROUTER_EVENTS}{{{selector}}}[{RATE_WINDOW}]))",
        "totals": f"sum by (output, stage) ({names.ROUTER_EVENTS}{{{selector}}})",
        "lag": f"max by (output) ({names.ROUTER_LAG}{{{selector}}})",
        "p99": "histogram_quantile(0.99, sum by (output, le) "
        f"(rate({names.DELIVERY_LATENCY_SECONDS}_bucket{{{selector}}}[5m])))",
    }
    try:
        results = {key: instant(settings, promql) for key, promql in queries.items()}
    except PrometheusError as e:
        status.metrics_error = str(e)
        return status
    for key in ("rates", "totals"):
        for sample in results[key]:
            output = outputs.get(sample["metric"].get("output", ""))
            if output is not None:
                getattr(output, key)[sample["metric"]["stage"]] = _number(sample)
    for key, attribute in (("lag", "lag"), ("p99", "latency_p99")):
        for sample in results[key]:
            output = outputs.get(sample["metric"].get("output", ""))
            value = _number(sample)
            if output is not None and value == value:  # NaN: no events in the window
                setattr(output, attribute, value)
    return status


def _number(sample: dict[str, Any]) -> float:
    return round(float(sample["value"][1]), 6)
