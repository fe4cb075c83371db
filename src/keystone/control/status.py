"""A stream's status: its router as the fleet sees it, per output its rates, lag and latency as
Prometheus has scraped them from the router, and its latest rewind and backfill; its archive's
figures too, the stream's latest redrive, and its alerts as Alertmanager holds them.

Fetched (`fetch`: the registry, progress files and checkpoints, Prometheus), then composed by
a pure function (`compose`), which the tests drive with facts of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from keystone.alerts.client import Alertmanager
from keystone.contracts import metrics as names
from keystone.contracts.errors import KeystoneError
from keystone.contracts.names import ARCHIVE_QUERY
from keystone.contracts.recovery import Backfill, Redrive
from keystone.contracts.registry import RegistryReader, RouterState
from keystone.contracts.settings import Settings
from keystone.contracts.shadows import Shadow
from keystone.contracts.sinks import HiveSink
from keystone.contracts.spec import StreamSpec
from keystone.control.models import (
    AlertPublic,
    BackfillPublic,
    FrontingPublicStream,
    OutputStatusPublic,
    RedrivePublic,
    RewindPublic,
    RouterPublic,
    ShadowPublic,
    StatusPublic,
)
from keystone.control.operations import JobView, view_of
from keystone.control.rewinds import Progress, progress
from keystone.control.shadows import ShadowView
from keystone.control.shadows import view_of as shadow_view
from keystone.dashboards.prometheus import PrometheusError, instant

RATE_WINDOW = "1m"
# A Prometheus answer: per query, its samples ({"metric": labels, "value": [time, "number"]}).
Samples = dict[str, list[dict[str, Any]]]
Guarantee = Literal["at_least_once", "exactly_once"]


@dataclass(frozen=True)
class Facts:
    """What a stream's status is made of, as fetched."""

    spec: StreamSpec
    router: RouterState | None
    rewinds: dict[str, Progress] = field(default_factory=dict)  # by output
    backfills: dict[str, JobView[Backfill]] = field(default_factory=dict)  # by output
    redrive: JobView[Redrive] | None = None
    shadows: dict[str, ShadowView] = field(default_factory=dict)  # by output
    figures: Samples | None = None  # None: Prometheus was not asked, or did not answer
    metrics_error: str | None = None
    fronting: FrontingPublicStream | None = None  # where there are several fronting clusters
    alerts: list[dict[str, Any]] = field(default_factory=list)  # as Alertmanager holds them
    alerts_error: str | None = None


def queries(stream: str) -> dict[str, str]:
    """The PromQL of each figure, for the stream (a validated name: safe inside PromQL)."""
    selector = f'stream="{stream}"'
    return {
        "rates": "sum by (output, stage) "
        f"(rate({names.ROUTER_EVENTS}{{{selector}}}[{RATE_WINDOW}]))",
        "totals": f"sum by (output, stage) ({names.ROUTER_EVENTS}{{{selector}}})",
        "lag": f"max by (output) ({names.ROUTER_LAG}{{{selector}}})",
        "p99": "histogram_quantile(0.99, sum by (output, le) "
        f"(rate({names.DELIVERY_LATENCY_SECONDS}_bucket{{{selector}}}[5m])))",
    }


def fetch(settings: Settings, registry: RegistryReader, spec: StreamSpec) -> Facts:
    """The facts of the stream's status now; Prometheus is asked only while the stream has
    something it figures (an output or the archive)."""
    rewinds = {
        name: progress(settings, spec, rewind)
        for name, rewind in registry.rewinds(spec.name).items()
        if spec.output(name) is not None
    }
    backfills = {}
    for name, backfill in registry.backfills(spec.name).items():
        output = spec.output(name)
        if output is not None:
            backfills[name] = view_of(settings, spec.name, backfill, output.sink.kind.replay)
    redrive = registry.redrive(spec.name)
    shadows = {
        name: shadow_view(settings, spec, shadow)
        for name, shadow in registry.operations(Shadow, spec.name).items()
        if spec.output(name) is not None
    }
    figures, error = None, None
    if spec.outputs or spec.archive.enabled:
        try:
            figures = {k: instant(settings, q) for k, q in queries(spec.name).items()}
        except PrometheusError as e:
            error = str(e)
    alerts, alerts_error = [], None
    try:
        alerts = Alertmanager(settings).alerts({"stream": spec.name, "owner": spec.owner})
    except KeystoneError as e:
        alerts_error = e.message
    return Facts(
        spec=spec,
        alerts=alerts,
        alerts_error=alerts_error,
        router=registry.router_state(spec.name),
        rewinds=rewinds,
        backfills=backfills,
        redrive=view_of(settings, spec.name, redrive) if redrive is not None else None,
        shadows=shadows,
        figures=figures,
        metrics_error=error,
        fronting=_fronting(settings, registry, spec.name),
    )


def _fronting(
    settings: Settings, registry: RegistryReader, stream: str
) -> FrontingPublicStream | None:
    """Which fronting cluster takes the stream's writes, where there are several."""
    if len(settings.fronting_clusters) < 2:
        return None
    active = registry.fronting(settings)
    cluster = active.of(stream)
    return FrontingPublicStream(
        cluster=cluster,
        home=cluster == settings.fronting_clusters[0],
        alone=stream in active.streams,
        since=active.since or None,
        reason=active.reason or None,
    )


def compose(facts: Facts) -> StatusPublic:
    """The status the API answers, from its facts."""
    spec = facts.spec
    # Every field given, so that each is in the answer (the route leaves out what is unset: a
    # router without a record says only its state).
    outputs = {o.name: _figured(o.name, o.sink.type, o.guarantee) for o in spec.outputs}
    for name, rewound in facts.rewinds.items():
        outputs[name].rewind = RewindPublic.of_progress(spec.name, rewound)
    for name, view in facts.backfills.items():
        outputs[name].backfill = BackfillPublic.of_view(spec.name, view)
    for name, shadow in facts.shadows.items():
        outputs[name].shadow = ShadowPublic.of(spec.name, shadow)
    # Written like a Hive output, and figured like an output.
    archive = _figured(ARCHIVE_QUERY, HiveSink().type, "exactly_once")
    status = StatusPublic(
        stream=spec.name,
        router=RouterPublic.of(facts.router, bool(spec.outputs)),
        outputs=list(outputs.values()),
        archive=archive if spec.archive.enabled else None,
        redrive=(
            RedrivePublic.of_view(spec.name, facts.redrive) if facts.redrive is not None else None
        ),
        metrics_error=facts.metrics_error,
        fronting=facts.fronting,
        alerts=[AlertPublic.of(a) for a in facts.alerts],
        alerts_error=facts.alerts_error,
    )
    if spec.archive.enabled:
        outputs[ARCHIVE_QUERY] = archive
    for key in ("rates", "totals"):
        for sample in (facts.figures or {}).get(key, []):
            output = outputs.get(sample["metric"].get("output", ""))
            if output is not None:
                getattr(output, key)[sample["metric"]["stage"]] = _number(sample)
    for key, attribute in (("lag", "lag"), ("p99", "latency_p99")):
        for sample in (facts.figures or {}).get(key, []):
            output = outputs.get(sample["metric"].get("output", ""))
            value = _number(sample)
            if output is not None and value == value:  # NaN: no events in the window
                setattr(output, attribute, value)
    return status


def stream_status(settings: Settings, registry: RegistryReader, spec: StreamSpec) -> StatusPublic:
    return compose(fetch(settings, registry, spec))


def _figured(name: str, sink: str, guarantee: Guarantee) -> OutputStatusPublic:
    return OutputStatusPublic(
        name=name,
        sink=sink,
        guarantee=guarantee,
        rates={},
        totals={},
        lag=None,
        latency_p99=None,
    )


def _number(sample: dict[str, Any]) -> float:
    return round(float(sample["value"][1]), 6)
