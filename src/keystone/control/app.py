"""The control service: `create_app(settings)`, the REST API, the web UI and the fleet.

Run by the stack as `uvicorn control.app:app_from_env --factory` (one process: it runs the
fleet; a lease in Redis keeps a second one from running another fleet).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import Scope

from keystone.contracts import metrics as names
from keystone.contracts.errors import KeystoneError
from keystone.contracts.limits import Limits
from keystone.contracts.registry import RouterPhase
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.control import api, ui
from keystone.control.gate import Gate
from keystone.control.plane import Plane
from keystone.control.rewinds import progress
from keystone.control.store import Store
from keystone.control.tenancy import Caller

log = logging.getLogger(__name__)


class FleetCollector(Collector):
    """Routers by state and each router's restarts, read from the fleet's records per scrape,
    and each output's latest rewind (`rewind_figures`)."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        plane: Plane | None = getattr(self.app.state, "plane", None)
        if plane is None:
            return
        try:
            states = plane.store.router_states()
        except KeystoneError:
            return  # Redis away: no figures rather than wrong ones
        by_state = GaugeMetricFamily(names.CONTROL_ROUTERS, "Routers by state", labels=["state"])
        counts = dict.fromkeys((p for p in RouterPhase if p is not RouterPhase.NONE), 0)
        for state in states.values():
            counts[state.state] = counts.get(state.state, 0) + 1
        for state, count in counts.items():
            by_state.add_metric([state], count)
        restarts = GaugeMetricFamily(
            names.CONTROL_ROUTER_RESTARTS,
            "Times the fleet restarted the stream's router after it died",
            labels=["stream"],
        )
        for stream, state in sorted(states.items()):
            restarts.add_metric([stream], state.restarts)
        yield by_state
        yield restarts
        yield from rewind_figures(plane)
        yield from fronting_figures(plane)


def fronting_figures(plane: Plane) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """Which fronting cluster takes every stream's writes (1 for it, 0 for the others, beside
    the streams switched alone), and the switches so far by cause: a dashboard marks each."""
    try:
        active = plane.store.fronting(plane.settings)
        switches = plane.store.fronting_switches()
    except KeystoneError:
        return
    taking = GaugeMetricFamily(
        names.CONTROL_FRONTING_ACTIVE,
        "1 for the fronting cluster that takes every stream's writes (but those switched alone)",
        labels=["cluster"],
    )
    for cluster in plane.settings.fronting_clusters:
        taking.add_metric([cluster], 1 if cluster == active.cluster else 0)
    alone = GaugeMetricFamily(
        names.CONTROL_FRONTING_STREAMS,
        "Streams whose writes a cluster takes though it does not take every stream's",
        labels=["cluster"],
    )
    for cluster in plane.settings.fronting_clusters:
        alone.add_metric([cluster], sum(1 for c in active.streams.values() if c == cluster))
    counted = CounterMetricFamily(
        names.CONTROL_FRONTING_SWITCHES.removesuffix("_total"),
        "Switches of the fronting cluster that takes writes, by cause",
        labels=["from", "to", "reason"],
    )
    for (before, after, reason), count in sorted(switches.items()):
        counted.add_metric([before, after, reason], count)
    since = GaugeMetricFamily(
        names.CONTROL_FRONTING_SINCE,
        "When the writes last moved (epoch seconds), by the cluster taking every stream's",
        labels=["cluster"],
    )
    if active.since:
        since.add_metric([active.cluster], active.since)
    yield taking
    yield alone
    yield counted
    yield since


def rewind_figures(plane: Plane) -> Iterator[GaugeMetricFamily]:
    """Per output with a rewind, the events its replay still has to read and when it was asked,
    from the registry and the output's checkpoint. Each stream on its own: one that cannot be
    read is logged and left out, not every stream's figures with it."""
    try:
        specs, _ = plane.store.read_streams()  # the unreadable ones: the fleet's to report
    except KeystoneError:
        return
    remaining = GaugeMetricFamily(
        names.REWIND_REMAINING,
        "Events of the fronting topic the output's latest rewind still has to replay "
        "(0 once caught up)",
        labels=["stream", "output"],
    )
    started = GaugeMetricFamily(
        names.REWIND_STARTED,
        "When the output's latest rewind was asked, epoch seconds",
        labels=["stream", "output"],
    )
    for spec in specs:
        try:
            figures = _figures_of(plane.settings, plane.store, spec)
        except Exception:  # a collector that raises fails the whole scrape, every figure lost
            log.warning("no rewind figures for stream %s", spec.name, exc_info=True)
            continue
        for output, left, asked in figures:
            remaining.add_metric([spec.name, output], left)
            started.add_metric([spec.name, output], asked)
    yield remaining
    yield started


def _figures_of(settings: Settings, store: Store, spec: StreamSpec) -> list[tuple[str, int, float]]:
    """(output, events still to replay, requested at) per output of the spec with a rewind."""
    rewinds = store.rewinds(spec.name)
    figures = []
    for output in spec.outputs:  # a rewind of an output since removed is not asked about
        rewind = rewinds.get(output.name)
        if rewind is not None:
            done = progress(settings, spec, rewind).replayed
            figures.append((output.name, max(0, rewind.total - done), rewind.requested_at))
    return figures


def problems_of(error: RequestValidationError) -> list[dict[str, str]]:
    """FastAPI's validation errors as the spec's [{field, message}] (without 'body.')."""
    found = []
    for e in error.errors():
        loc = [str(p) for p in e["loc"]]
        if loc and loc[0] in ("body", "query", "path"):
            loc = loc[1:] if loc[0] == "body" else loc
        message = e["msg"].removeprefix("Value error, ")
        if e["type"] == "json_invalid":  # say what in the JSON was refused
            message = f"{message}: {e.get('ctx', {}).get('error', '')}"
            loc = []
        found.append({"field": ".".join(loc) or "(body)", "message": message})
    return found


def with_limits(schema: dict[str, Any], limits: Limits) -> dict[str, Any]:
    """The OpenAPI schema with this deployment's limits where a client can see them before it
    is refused: maxima and lengths on the fields they bound."""
    models = schema["components"]["schemas"]
    bounds = {
        ("StreamSpec", "partitions"): {"maximum": limits.max_partitions},
        ("StreamSpec", "outputs"): {"maxItems": limits.max_outputs_per_stream},
        ("OutputSpec", "filter"): {"maxLength": limits.max_filter_chars},
        ("OutputSpec", "projection"): {"maxItems": limits.max_projection_fields},
        ("PreviewRequest", "filter"): {"maxLength": limits.max_filter_chars},
        ("PreviewRequest", "projection"): {"maxItems": limits.max_projection_fields},
        ("AppCreate", "rate"): {"maximum": limits.max_app_rate},
    }
    for (model, field), bound in bounds.items():
        prop = models[model]["properties"][field]
        # An optional field is anyOf [its type, null]: the bound is the type's.
        target = next((b for b in prop.get("anyOf", []) if b.get("type") != "null"), prop)
        target.update(bound)
    schema["info"]["description"] += (
        f" Request bodies: at most {limits.max_control_body_bytes} bytes (max_control_body_bytes)."
    )
    return schema


def create_app(settings: Settings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        plane = Plane.build(settings)
        app.state.plane = plane
        plane.fleet.start()
        try:
            yield
        finally:
            plane.fleet.stop()
            plane.store.close()

    app = FastAPI(
        title="Keystone control",
        description="Self-service streams and outputs, producing apps, the router fleet.",
        lifespan=lifespan,
    )
    registry = CollectorRegistry()
    requests = Counter(
        names.CONTROL_REQUESTS.removesuffix("_total"),
        "API and UI requests",
        ["method", "route", "status"],
        registry=registry,
    )
    registry.register(FleetCollector(app))

    def authenticate(scope: Scope, authorization: str | None) -> Caller:
        plane: Plane = scope["app"].state.plane
        return plane.auth.caller(authorization)

    # Outermost but for the counter: nothing of a body is read before its size and token pass.
    app.add_middleware(Gate, limit=settings.max_control_body_bytes, authenticate=authenticate)

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]):
        response = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "(unmatched)")
        requests.labels(request.method, path, str(response.status_code)).inc()
        return response

    @app.exception_handler(KeystoneError)
    async def _error(request: Request, error: KeystoneError) -> Response:
        if ui.wants_page(request):
            return ui.error_page(request, error)
        return JSONResponse(error.body(), status_code=error.status, headers=error.headers())

    @app.exception_handler(ui.SignIn)
    async def _sign_in(_: Request, __: ui.SignIn) -> RedirectResponse:
        return RedirectResponse("/ui/login", status_code=303)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, error: RequestValidationError) -> JSONResponse:
        body = {
            "error": "InvalidRequest",
            "message": "the request is not valid",
            "problems": problems_of(error),
        }
        return JSONResponse(body, status_code=422)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = with_limits(FastAPI.openapi(app), settings)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.include_router(api.router)
    app.include_router(ui.router)
    app.mount("/ui/static", ui.static, name="static")
    app.mount("/ui/vendor/uplot", ui.vendor, name="uplot")

    @app.get("/", include_in_schema=False)
    async def home() -> RedirectResponse:
        return RedirectResponse("/ui/")

    @app.get("/healthz", tags=["service"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["service"])
    def readyz(request: Request) -> JSONResponse:
        plane: Plane = request.app.state.plane
        try:
            plane.store.version()
            registry_ok = True
        except KeystoneError:
            registry_ok = False
        checks = {"registry": registry_ok, "fleet_leader": plane.fleet.leading}
        ready = registry_ok
        return JSONResponse({"ready": ready, **checks}, status_code=200 if ready else 503)

    @app.get("/metrics", tags=["service"])
    def prometheus_metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app


def app_from_env() -> FastAPI:
    """uvicorn's factory: settings from KEYSTONE_* variables."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # else a line per router probe
    return create_app(Settings())
