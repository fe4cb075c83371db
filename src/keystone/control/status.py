"""A stream's status: its router as the fleet sees it, per output its rates, lag and latency as
Prometheus has scraped them from the router, and its latest rewind and backfill; its archive's
figures too."""

from __future__ import annotations

from typing import Any

from keystone.contracts import metrics as names
from keystone.contracts.names import ARCHIVE_QUERY
from keystone.contracts.recovery import Backfill, Redrive, Rewind
from keystone.contracts.registry import RouterState
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.control.backfills import progress_of
from keystone.control.deadletters import progress_of as redrive_progress
from keystone.control.models import (
    BackfillPublic,
    OutputStatusPublic,
    RedrivePublic,
    RewindPublic,
    RouterPublic,
    StatusPublic,
)
from keystone.control.rewinds import progress
from keystone.dashboards.prometheus import PrometheusError, instant
from keystone.router.sinks.registry import SINKS

RATE_WINDOW = "1m"


def stream_status(
    settings: Settings,
    spec: StreamSpec,
    state: RouterState | None,
    rewinds: dict[str, Rewind] | None = None,
    backfills: dict[str, Backfill] | None = None,
    redrive: Redrive | None = None,
) -> StatusPublic:
    """`rewinds` and `backfills`: the outputs' latest, each shown with its progress; `redrive`
    the stream's latest, likewise."""
    # Every field given, so that each is in the answer (the route leaves out what is unset: a
    # router without a record says only its state).
    outputs = {
        o.name: OutputStatusPublic(
            name=o.name,
            sink=o.sink.type,
            guarantee=o.guarantee,
            rates={},
            totals={},
            lag=None,
            latency_p99=None,
        )
        for o in spec.outputs
    }
    for name, rewind in (rewinds or {}).items():
        if name in outputs:
            outputs[name].rewind = RewindPublic.of_progress(
                spec.name, progress(settings, spec, rewind)
            )
    archive = None
    if spec.archive.enabled:
        archive = OutputStatusPublic(
            name=ARCHIVE_QUERY,
            sink="hive",
            guarantee="exactly_once",
            rates={},
            totals={},
            lag=None,
            latency_p99=None,
        )
    for name, backfill in (backfills or {}).items():
        output = spec.output(name)
        if output is not None:
            view = progress_of(settings, spec.name, backfill, SINKS[output.sink.type].replay)
            outputs[name].backfill = BackfillPublic.of_view(spec.name, view)
    status = StatusPublic(
        stream=spec.name,
        router=RouterPublic.of(state, bool(spec.outputs)),
        outputs=list(outputs.values()),
        archive=archive,
        redrive=(
            RedrivePublic.of_view(spec.name, redrive_progress(settings, spec.name, redrive))
            if redrive is not None
            else None
        ),
        metrics_error=None,
    )
    if archive is not None:  # figured like an output (after the list is made)
        outputs[ARCHIVE_QUERY] = archive
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
