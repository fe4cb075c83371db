"""The web UI for stream owners, served by control under /ui/: the streams with their health,
a stream's page (outputs, rates, its dashboard), the apps with their keys and Kafka users, and
forms to create a stream and add an output,
with a filter and projection editor that previews on recent events and shows errors inline. On
the stream's page, each output's restore points and a rewind, confirmed once its plan is shown,
followed until it has caught up.

Pages call the same functions as the REST API. Signing in with a token opens a session that
control keeps in Redis (12 hours, ended by signing out or by rotating the token); its id is
kept in an HttpOnly, SameSite=Strict cookie scoped to /ui; forms that change anything also
check that the request comes from this site (Origin), so another site cannot post them.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from pydantic import ValidationError

from keystone.alerts.client import Alertmanager
from keystone.contracts.errors import Forbidden, InvalidSpec, KeystoneError, Unauthorized
from keystone.contracts.receivers import ReceiverKind
from keystone.contracts.sinks import SINK_TYPES
from keystone.contracts.spec import DEFAULT_TRIGGERS, OutputSpec, StreamSpec, field_errors
from keystone.control.api import PlaneDep
from keystone.control.lineage import lineage
from keystone.control.models import (
    AlertPublic,
    AppPublic,
    BackfillPublic,
    BackfillRequest,
    DeadLettersPublic,
    FrontingPublic,
    KafkaCredential,
    PreviewRequest,
    ReceiverCreate,
    ReceiverPublic,
    RedrivePublic,
    RedriveRequest,
    RestorePointPublic,
    RewindPublic,
    RewindRequest,
    ShadowPublic,
    ShadowRequest,
    SilencePublic,
)
from keystone.control.plane import Plane
from keystone.control.preview import preview
from keystone.control.status import stream_status
from keystone.control.tenancy import SESSION_SECONDS, Caller
from keystone.dashboards.grafana import dashboard
from keystone.dashboards.live import (
    panel_data,
    panel_layout,
    rewind_marks,
    stream_alerts,
    switch_marks,
)
from keystone.dashboards.panels import fleet_panels, stream_panels
from keystone.dashboards.prometheus import PrometheusError, instant, window
from keystone.dashboards.rules import ALERTS

log = logging.getLogger(__name__)

HERE = Path(__file__).parent / "web"
COOKIE = "keystone_session"
templates = Jinja2Templates(directory=HERE / "templates")
templates.env.globals["default_triggers"] = DEFAULT_TRIGGERS  # the interval field's hint
templates.env.globals["sink_types"] = SINK_TYPES  # the sink field's choices and the target's hint
templates.env.globals["receiver_kinds"] = list(ReceiverKind)
templates.env.globals["alert_names"] = ALERTS  # what an owner may silence
# Epoch seconds as people read them, in UTC like every time on the pages.
templates.env.filters["utc"] = lambda epoch: time.strftime(
    "%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch)
)
router = APIRouter(prefix="/ui", include_in_schema=False)
static = StaticFiles(directory=HERE / "static")
# uPlot, as the bootstrap installed it from npm (package-lock.json in web/) and copied here.
vendor = StaticFiles(directory=HERE / "vendor" / "uplot", check_dir=False)


class SignIn(Exception):
    """The page needs a signed-in user: answered with a redirect to the sign-in page."""


def ui_caller(request: Request) -> Caller:
    plane: Plane = request.app.state.plane
    session = request.cookies.get(COOKIE)
    if not session:
        raise SignIn
    try:
        return plane.auth.session(session)
    except Unauthorized as e:
        raise SignIn from e


def same_site(request: Request) -> None:
    """Refuses a state-changing request that another site's page made."""
    origin = request.headers.get("origin") or request.headers.get("referer")
    if origin and urlsplit(origin).netloc != request.headers.get("host"):
        raise Forbidden("this form was posted from another site")


UICaller = Annotated[Caller, Depends(ui_caller)]


def wants_page(request: Request) -> bool:
    """A browser asking for a page (not the page's own scripts asking for JSON)."""
    return request.url.path.startswith("/ui/") and "text/html" in request.headers.get("accept", "")


def error_page(request: Request, error: KeystoneError) -> HTMLResponse:
    titles = {401: "Sign in needed", 403: "Not allowed", 404: "Not found", 409: "Conflict"}
    return page(
        request,
        "error.html",
        None,
        title=titles.get(error.status, "Something went wrong"),
        message=error.message,
        status=error.status,
        status_code=error.status,
    )


def page(request: Request, name: str, who: Caller | None, **context: Any) -> HTMLResponse:
    status = context.pop("status_code", 200)
    return templates.TemplateResponse(request, name, {"who": who, **context}, status_code=status)


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request) -> HTMLResponse:
    return page(request, "login.html", None, error=None)


@router.post("/login", response_class=HTMLResponse, dependencies=[Depends(same_site)])
def login(request: Request, plane: PlaneDep, token: Annotated[str, Form()]) -> Response:
    try:
        session = plane.auth.sign_in(token.strip())
    except Unauthorized:
        return page(request, "login.html", None, error="That token is not valid.", status_code=401)
    response = RedirectResponse("/ui/", status_code=303)
    response.set_cookie(
        COOKIE, session, httponly=True, samesite="strict", path="/ui", max_age=SESSION_SECONDS
    )
    return response


@router.post("/logout", dependencies=[Depends(same_site)])
def logout(request: Request, plane: PlaneDep) -> Response:
    session = request.cookies.get(COOKIE)
    if session:
        plane.auth.sign_out(session)  # ended here, not only forgotten by this browser
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(COOKIE, path="/ui")
    return response


@router.get("/", response_class=HTMLResponse)
def streams_page(request: Request, plane: PlaneDep, who: UICaller) -> HTMLResponse:
    specs = plane.streams.list(who)
    states = plane.store.router_states()
    rates: dict[str, dict[str, float]] = {}
    metrics_error = None
    try:
        for stage, promql in (
            (
                "accepted",
                'sum by (stream) (rate(keystone_ingest_events_total{result="accepted"}[1m]))',
            ),
            (
                "delivered",
                'sum by (stream) (rate(keystone_router_events_total{stage="delivered"}[1m]))',
            ),
        ):
            for sample in instant(plane.settings, promql):
                stream = sample["metric"].get("stream", "")
                rates.setdefault(stream, {})[stage] = float(sample["value"][1])
    except PrometheusError as e:
        metrics_error = str(e)
    rows = [
        {"spec": s, "router": states.get(s.name), "rates": rates.get(s.name, {})} for s in specs
    ]
    return page(request, "streams.html", who, rows=rows, metrics_error=metrics_error)


@router.get("/apps", response_class=HTMLResponse)
def apps_page(request: Request, plane: PlaneDep, who: UICaller) -> HTMLResponse:
    return _apps_page(request, plane, who)


@router.post("/apps/{app}/key", response_class=HTMLResponse, dependencies=[Depends(same_site)])
def rotate_app_key(request: Request, app: str, plane: PlaneDep, who: UICaller) -> HTMLResponse:
    key, kafka_password = plane.accounts.rotate_app(who, app)
    shown = [(f"{app}'s new key", key)]
    if kafka_password:
        shown.append((f"{app}'s new Kafka password", kafka_password))
    return _apps_page(request, plane, who, shown)


@router.post("/apps/{app}/kafka", response_class=HTMLResponse, dependencies=[Depends(same_site)])
def issue_kafka(request: Request, app: str, plane: PlaneDep, who: UICaller) -> HTMLResponse:
    password = plane.accounts.issue_kafka(who, app)
    credential = KafkaCredential.of(app, password, plane.settings, plane.store.streams())
    user = f"{credential.username} ({credential.mechanism} over {credential.security_protocol})"
    return _apps_page(request, plane, who, [(f"Kafka password of {user}", password)])


@router.post(
    "/apps/{app}/kafka/revoke", response_class=HTMLResponse, dependencies=[Depends(same_site)]
)
def revoke_kafka(request: Request, app: str, plane: PlaneDep, who: UICaller) -> Response:
    plane.accounts.revoke_kafka(who, app)
    return RedirectResponse("/ui/apps", status_code=303)


def _apps_page(
    request: Request, plane: Plane, who: Caller, shown: list[tuple[str, str]] | None = None
) -> HTMLResponse:
    """The caller's apps; `shown`: secrets just made, each with what it is (shown only now)."""
    streams = plane.store.streams()
    apps = [AppPublic.seen_by(a, streams, who) for a in plane.accounts.apps(who)]
    kafka = plane.accounts.access.enabled
    return page(request, "apps.html", who, apps=apps, shown=shown or [], kafka=kafka)


@router.get("/fronting", response_class=HTMLResponse)
def fronting_page(request: Request, plane: PlaneDep, who: UICaller) -> HTMLResponse:
    return page(request, "fronting.html", who, view=FrontingPublic.of(plane.fronting.view(who)))


@router.post("/fronting/switch", response_class=HTMLResponse, dependencies=[Depends(same_site)])
def switch_fronting(
    plane: PlaneDep,
    who: UICaller,
    to: Annotated[str, Form()] = "",
    stream: Annotated[str, Form()] = "",
) -> Response:
    """The admin's failover (`to` a cluster) or failback (`to` empty: home)."""
    plane.fronting.switch(who, to or None, stream or None)
    return RedirectResponse("/ui/fronting", status_code=303)


@router.get("/streams/new", response_class=HTMLResponse)
def new_stream_form(request: Request, plane: PlaneDep, who: UICaller) -> HTMLResponse:
    apps = [a.name for a in plane.accounts.apps(who)]
    return page(request, "stream_new.html", who, form={}, problems={}, apps=apps, error=None)


@router.post("/streams/new", response_class=HTMLResponse, dependencies=[Depends(same_site)])
def create_stream(
    request: Request,
    plane: PlaneDep,
    who: UICaller,
    name: Annotated[str, Form()],
    partitions: Annotated[str, Form()] = "6",
    producers: Annotated[str, Form()] = "",
    owner: Annotated[str, Form()] = "",
) -> Response:
    form = {"name": name, "partitions": partitions, "producers": producers, "owner": owner}
    data = {
        "name": name.strip(),
        "owner": (owner.strip() if who.admin else who.name) or who.name,
        "partitions": partitions.strip() or "6",
        "producers": [p.strip() for p in producers.replace(",", " ").split() if p.strip()],
    }
    try:
        spec = StreamSpec.model_validate(data)
        plane.streams.create(who, spec)
    except (ValidationError, KeystoneError) as e:
        apps = [a.name for a in plane.accounts.apps(who)]
        error, problems = _explain(e)
        return page(
            request,
            "stream_new.html",
            who,
            form=form,
            problems=problems,
            apps=apps,
            error=error,
            status_code=422 if problems else _status(e),
        )
    return RedirectResponse(f"/ui/streams/{spec.name}", status_code=303)


@router.get("/streams/{stream}", response_class=HTMLResponse)
def stream_page(request: Request, stream: str, plane: PlaneDep, who: UICaller) -> HTMLResponse:
    spec = plane.streams.get(who, stream)
    return page(
        request,
        "stream.html",
        who,
        spec=spec,
        status=_status_of(plane, spec),
        lineage=lineage(spec, plane.shadows.versions_running(spec.name)),
        **_silences_of(plane, who, spec.name),
        form={
            "sink": "kafka",
            "mode": "realtime",
            "trigger": "",
            "start": "latest",
            "projection": "*",
        },
        problems={},
        error=None,
    )


@router.get("/streams/{stream}/status")
def stream_status_json(stream: str, plane: PlaneDep, who: UICaller) -> JSONResponse:
    """The stream page refreshes its router and output figures from here."""
    return JSONResponse(_status_of(plane, plane.streams.get(who, stream)))


@router.post(
    "/streams/{stream}/outputs", response_class=HTMLResponse, dependencies=[Depends(same_site)]
)
def add_output(
    request: Request,
    stream: str,
    plane: PlaneDep,
    who: UICaller,
    name: Annotated[str, Form()],
    sink: Annotated[str, Form()],
    target: Annotated[str, Form()] = "",
    filter: Annotated[str, Form()] = "",
    projection: Annotated[str, Form()] = "*",
    mode: Annotated[str, Form()] = "realtime",
    trigger: Annotated[str, Form()] = "",
    guarantee: Annotated[str, Form()] = "at_least_once",
    start: Annotated[str, Form()] = "latest",
) -> Response:
    spec = plane.streams.get(who, stream)
    form = {
        "name": name,
        "sink": sink,
        "target": target,
        "filter": filter,
        "projection": projection,
        "mode": mode,
        "trigger": trigger,
        "guarantee": guarantee,
        "start": start,
    }
    sink_config: dict[str, Any] = {"type": sink}
    kind = SINK_TYPES.get(sink)
    field = kind.target_field if kind is not None else None
    if field is not None and (target.strip() or field.required):
        sink_config[field.name] = target.strip()
    data = {
        "name": name.strip(),
        "filter": filter.strip() or None,
        "projection": _projection(projection),
        "sink": sink_config,
        "delivery": {
            # A sink of one mode takes it whatever the form said (a Hive output's micro-batches).
            "mode": kind.modes[0] if kind is not None and len(kind.modes) == 1 else mode,
            "trigger": trigger.strip() or None,  # the mode's default
            "guarantee": guarantee,
        },
        "start": start,
    }
    try:
        output = OutputSpec.model_validate(data)
        plane.streams.put_output(who, stream, output)
    except (ValidationError, KeystoneError) as e:
        index = next((i for i, o in enumerate(spec.outputs) if o.name == data["name"]), None)
        error, problems = _explain(
            e, prefix=f"outputs.{len(spec.outputs) if index is None else index}."
        )
        return page(
            request,
            "stream.html",
            who,
            spec=spec,
            status=_status_of(plane, spec),
            lineage=lineage(spec, plane.shadows.versions_running(spec.name)),
            **_silences_of(plane, who, spec.name),
            form=form,
            problems=problems,
            error=error,
            status_code=422 if problems else _status(e),
        )
    return RedirectResponse(f"/ui/streams/{stream}#output-{output.name}", status_code=303)


@router.post("/streams/{stream}/outputs/{output}/delete", dependencies=[Depends(same_site)])
def delete_output(stream: str, output: str, plane: PlaneDep, who: UICaller) -> Response:
    plane.streams.delete_output(who, stream, output)
    return RedirectResponse(f"/ui/streams/{stream}", status_code=303)


@router.post("/streams/{stream}/preview", dependencies=[Depends(same_site)])
def preview_draft(
    stream: str, body: PreviewRequest, plane: PlaneDep, who: UICaller
) -> JSONResponse:
    """The editor's preview: the draft's filter and projection over recent events; parse
    errors come back as 422 with the field and column, for the editor to point at."""
    spec = plane.streams.get(who, stream)
    result = preview(
        plane.settings,
        spec,
        body.filter or None,
        body.projection or ["*"],
        body.limit,
        plane.settings,  # a draft: held to the limits of a new output
        plane.store.specs.ensure_hashing_key(stream),
    )
    return JSONResponse(result.__dict__)


# Alerts: the caller's receivers, and a stream's silences (its page lists them, with control's
# own while an operation runs, and takes new ones).


@router.get("/receivers", response_class=HTMLResponse)
def receivers_page(request: Request, plane: PlaneDep, who: UICaller) -> HTMLResponse:
    return _receivers_page(request, plane, who)


@router.post("/receivers", response_class=HTMLResponse, dependencies=[Depends(same_site)])
def add_receiver(
    request: Request,
    plane: PlaneDep,
    who: UICaller,
    name: Annotated[str, Form()],
    kind: Annotated[str, Form()],
    url: Annotated[str, Form()] = "",
    to: Annotated[str, Form()] = "",
    channel: Annotated[str, Form()] = "",
    send_resolved: Annotated[bool, Form()] = False,
) -> Response:
    # The URL is a secret: never sent back, not even into the form it came from.
    form = {"name": name, "kind": kind, "to": to, "channel": channel}
    data = {
        "name": name.strip(),
        "kind": kind,
        "url": url.strip() or None,
        "to": to.strip() or None,
        "channel": channel.strip() or None,
        "send_resolved": send_resolved,
    }
    try:
        plane.receivers.add(who, ReceiverCreate.model_validate(data).receiver())
    except (ValidationError, KeystoneError) as e:
        error, problems = _explain(e)
        error = problems.pop("(spec)", error)  # the kind's needs: the form's, not a field's
        status = 422 if isinstance(e, ValidationError) else _status(e)
        return _receivers_page(request, plane, who, form, problems, error, status)
    return RedirectResponse("/ui/receivers", status_code=303)


@router.post(
    "/receivers/{name}/delete", response_class=HTMLResponse, dependencies=[Depends(same_site)]
)
def remove_receiver(
    name: str, plane: PlaneDep, who: UICaller, owner: Annotated[str, Form()] = ""
) -> Response:
    plane.receivers.remove(who, name, owner or None)
    return RedirectResponse("/ui/receivers", status_code=303)


def _receivers_page(
    request: Request,
    plane: Plane,
    who: Caller,
    form: dict[str, str] | None = None,
    problems: dict[str, str] | None = None,
    error: str | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    receivers = [ReceiverPublic.of(r) for r in plane.receivers.list(who)]
    return page(
        request,
        "receivers.html",
        who,
        receivers=receivers,
        admin_webhook=bool(plane.settings.alert_admin_webhook),
        smtp=bool(plane.settings.smtp_smarthost),
        form=form or {"kind": ReceiverKind.WEBHOOK.value},
        problems=problems or {},
        error=error,
        status_code=status_code,
    )


@router.post(
    "/streams/{stream}/silences", response_class=HTMLResponse, dependencies=[Depends(same_site)]
)
def add_silence(
    stream: str,
    plane: PlaneDep,
    who: UICaller,
    hours: Annotated[float, Form(gt=0, allow_inf_nan=False)],
    alert: Annotated[str, Form()] = "",
    comment: Annotated[str, Form(max_length=500)] = "",
) -> Response:
    plane.silences.add(who, stream, alert or None, hours, comment.strip())
    return RedirectResponse(f"/ui/streams/{stream}#alerts", status_code=303)


@router.post(
    "/streams/{stream}/silences/{silence}/expire",
    response_class=HTMLResponse,
    dependencies=[Depends(same_site)],
)
def expire_silence(stream: str, silence: str, plane: PlaneDep, who: UICaller) -> Response:
    plane.silences.expire(who, stream, silence)
    return RedirectResponse(f"/ui/streams/{stream}#alerts", status_code=303)


def _silences_of(plane: Plane, who: Caller, stream: str) -> dict[str, Any]:
    """The stream's silences for its page (`silences`), or why there are none to show
    (`silences_error`: Alertmanager did not answer; the rest of the page still shows)."""
    try:
        found = [SilencePublic.of(stream, s) for s in plane.silences.list(who, stream)]
    except KeystoneError as e:
        return {"silences": [], "silences_error": e.message}
    return {"silences": sorted(found, key=lambda s: s.ends_at), "silences_error": None}


# Recovery: the page lists an output's restore points, and asks for a rewind's (or a
# backfill's) plan (a dry run) to confirm before it asks for the rewind (or backfill) itself.


@router.get("/streams/{stream}/outputs/{output}/restore-points")
def restore_points(stream: str, output: str, plane: PlaneDep, who: UICaller) -> JSONResponse:
    points = plane.rewinds.restore_points(who, stream, output)
    return JSONResponse([RestorePointPublic.of(p).model_dump(mode="json") for p in points])


@router.post("/streams/{stream}/outputs/{output}/rewind", dependencies=[Depends(same_site)])
def rewind(
    stream: str, output: str, body: RewindRequest, plane: PlaneDep, who: UICaller
) -> JSONResponse:
    """With dry_run, what the rewind would do (200), for the page's confirmation; without, the
    rewind started (202)."""
    plan = plane.rewinds.plan(who, stream, output, body.target(), body.max_events_per_second)
    if not body.dry_run:
        plane.rewinds.start(who, plan)
    answer = RewindPublic.of_plan(stream, plan, started=not body.dry_run)
    return JSONResponse(answer.model_dump(mode="json"), status_code=200 if body.dry_run else 202)


@router.post("/streams/{stream}/outputs/{output}/backfill", dependencies=[Depends(same_site)])
def backfill(
    stream: str, output: str, body: BackfillRequest, plane: PlaneDep, who: UICaller
) -> JSONResponse:
    """With dry_run, what the backfill would do (200), for the page's confirmation; without,
    the backfill started (202)."""
    args = (who, stream, output, body.start, body.end, body.max_events_per_second)
    plan = plane.backfills.plan(*args)
    if not body.dry_run:
        plane.backfills.start(who, plan)
    answer = BackfillPublic.of_plan(stream, plan, started=not body.dry_run)
    status = 200 if body.dry_run else 202
    return JSONResponse(answer.model_dump(mode="json", by_alias=True), status_code=status)


@router.delete("/streams/{stream}/outputs/{output}/backfill", dependencies=[Depends(same_site)])
def cancel_backfill(stream: str, output: str, plane: PlaneDep, who: UICaller) -> JSONResponse:
    plane.backfills.cancel(who, stream, output)
    view = plane.backfills.view(who, stream, output)
    answer = BackfillPublic.of_view(stream, view).model_dump(mode="json", by_alias=True)
    return JSONResponse(answer, status_code=202)


# Shadows: started from the changed output's JSON, promoted or dropped.


@router.post("/streams/{stream}/outputs/{output}/shadow", dependencies=[Depends(same_site)])
def shadow(
    stream: str, output: str, body: ShadowRequest, plane: PlaneDep, who: UICaller
) -> JSONResponse:
    asked = (body.output, body.expires_in, body.max_events_per_second)
    view = plane.shadows.start(who, stream, output, *asked)
    return JSONResponse(ShadowPublic.of(stream, view).model_dump(mode="json"), status_code=202)


@router.post("/streams/{stream}/outputs/{output}/shadow/promote", dependencies=[Depends(same_site)])
def promote_shadow(stream: str, output: str, plane: PlaneDep, who: UICaller) -> JSONResponse:
    view = plane.shadows.promote(who, stream, output)
    return JSONResponse(ShadowPublic.of(stream, view).model_dump(mode="json"), status_code=202)


@router.delete("/streams/{stream}/outputs/{output}/shadow", dependencies=[Depends(same_site)])
def drop_shadow(stream: str, output: str, plane: PlaneDep, who: UICaller) -> JSONResponse:
    view = plane.shadows.drop(who, stream, output)
    return JSONResponse(ShadowPublic.of(stream, view).model_dump(mode="json"), status_code=202)


@router.get("/streams/{stream}/dead-letters")
def dead_letters(stream: str, plane: PlaneDep, who: UICaller) -> JSONResponse:
    listing = DeadLettersPublic.of(stream, plane.dead_letters.groups(who, stream))
    return JSONResponse(listing.model_dump(mode="json"))


@router.post("/streams/{stream}/dead-letters/redrive", dependencies=[Depends(same_site)])
def redrive(stream: str, body: RedriveRequest, plane: PlaneDep, who: UICaller) -> JSONResponse:
    """With dry_run, what the redrive would send where (200), for the page's confirmation;
    without, the redrive started (202; 200 when it matched nothing)."""
    plan = plane.redrives.plan(who, stream, body.selection(), body.max_events_per_second)
    if body.dry_run:
        planned = RedrivePublic.of_plan(stream, plan, started=False)
        return JSONResponse(planned.model_dump(mode="json"))
    plan = plane.redrives.start(who, plan)
    started = RedrivePublic.of_plan(stream, plan, started=True)
    return JSONResponse(started.model_dump(mode="json"), 202 if plan.redrive.active else 200)


@router.delete("/streams/{stream}/dead-letters/redrive", dependencies=[Depends(same_site)])
def cancel_redrive(stream: str, plane: PlaneDep, who: UICaller) -> JSONResponse:
    plane.redrives.cancel(who, stream)
    view = RedrivePublic.of_view(stream, plane.redrives.view(who, stream))
    return JSONResponse(view.model_dump(mode="json"), status_code=202)


# Dashboards: the stream's, and the overview of the caller's streams.

Minutes = Annotated[int, Query(ge=5, le=7 * 24 * 60)]


@router.get("/streams/{stream}/dashboard", response_class=HTMLResponse)
def stream_dashboard(request: Request, stream: str, plane: PlaneDep, who: UICaller) -> HTMLResponse:
    spec = plane.streams.get(who, stream)
    return page(
        request,
        "dashboard.html",
        who,
        heading=f"{spec.name}",
        spec=spec,
        layout=panel_layout(stream_panels(spec)),
        source=f"/ui/streams/{stream}/dashboard/data",
    )


@router.get("/streams/{stream}/dashboard/data")
def stream_dashboard_data(
    stream: str, plane: PlaneDep, who: UICaller, minutes: Minutes = 15
) -> JSONResponse:
    spec = plane.streams.get(who, stream)
    return _dashboard_data(plane, stream_panels(spec), {spec.name}, minutes, stream=spec.name)


@router.get("/streams/{stream}/dashboard/grafana.json")
def stream_grafana(stream: str, plane: PlaneDep, who: UICaller) -> JSONResponse:
    """The stream's Grafana dashboard model, to import into a Grafana of one's own."""
    spec = plane.streams.get(who, stream)
    headers = {"Content-Disposition": f'attachment; filename="keystone-{stream}.json"'}
    return JSONResponse(dashboard(spec), headers=headers)


@router.get("/dashboard", response_class=HTMLResponse)
def fleet_dashboard(request: Request, plane: PlaneDep, who: UICaller) -> HTMLResponse:
    streams = None if who.admin else [s.name for s in plane.streams.list(who)]
    return page(
        request,
        "dashboard.html",
        who,
        heading="All streams" if who.admin else "Your streams",
        spec=None,
        layout=panel_layout(fleet_panels(streams)),
        source="/ui/dashboard/data",
    )


@router.get("/dashboard/data")
def fleet_dashboard_data(plane: PlaneDep, who: UICaller, minutes: Minutes = 15) -> JSONResponse:
    streams = None if who.admin else [s.name for s in plane.streams.list(who)]
    visible = None if streams is None else set(streams)
    return _dashboard_data(plane, fleet_panels(streams), visible, minutes)


def _dashboard_data(
    plane: Plane, panels: list, streams: set[str] | None, minutes: int, stream: str | None = None
) -> JSONResponse:
    """The charts' data and alerts, a stream's rewinds to mark on its charts, and the switches
    of fronting cluster that moved its writes (the fleet's page: every stream's)."""
    settings = plane.settings
    try:
        data = panel_data(settings, panels, minutes)
        data["alerts"] = stream_alerts(settings, streams)
        data["rewinds"] = rewind_marks(settings, stream, minutes) if stream else []
    except PrometheusError as e:
        return JSONResponse({"error": str(e)}, status_code=503)
    data["alerts_error"] = _notified(plane, data["alerts"], streams)
    data["switches"] = _switches(plane, stream, minutes)
    return JSONResponse(data)


def _notified(plane: Plane, rules: list[dict], streams: set[str] | None) -> str | None:
    """Adds to each rule Alertmanager's view of its alerts (`notified`: each one firing,
    silenced or inhibited, and whom a firing one reaches); why not, if Alertmanager did not
    answer (the rules' states still show)."""
    try:
        held = Alertmanager(plane.settings).alerts({})
    except KeystoneError as e:
        log.warning("alerts' notifications not shown: %s", e.message)
        return e.message
    by_rule: dict[tuple[str, str], list[dict]] = {}
    for alert in held:
        stream = alert.get("labels", {}).get("stream")
        if stream is None or (streams is not None and stream not in streams):
            continue
        public = AlertPublic.of(alert)
        reaches = public.receivers if public.state == "firing" else []
        by_rule.setdefault((stream, public.alert), []).append(
            {"state": public.state, "output": public.output, "receivers": reaches}
        )
    for rule in rules:
        rule["notified"] = by_rule.get((rule["stream"], rule["alert"]), [])
    return None


def _switches(plane: Plane, stream: str | None, minutes: int) -> list[dict]:
    """The switches to mark: read from the window's start (a minute early: the log's ids are
    Redis' clock, their times control's), none while the registry does not answer (the charts
    are drawn without them)."""
    settings = plane.settings
    if len(settings.fronting_clusters) < 2:
        return []
    start, _, _ = window(minutes, settings.scrape_interval_seconds)
    try:
        switches = plane.store.fronting_log(start - 60)
    except KeystoneError as e:
        log.warning("fronting switches not marked: %s", e.message)
        return []
    return switch_marks(switches, stream, start)


def _projection(text: str) -> list[str]:
    """The editor's projection: an item per line, or several on a line separated by commas
    outside parentheses and quotes; a line that starts with `* except` is one item (its commas
    separate the paths it leaves out). static/stream.js splits the same way."""
    items: list[str] = []
    for line in text.splitlines():
        if line.strip().startswith("*"):
            items.append(line.strip())
            continue
        depth, quoted, start = 0, False, 0
        for i, char in enumerate(line + ","):
            if char == "'":
                quoted = not quoted  # '' inside a string toggles twice: still inside
            elif not quoted and char in "()":
                depth += 1 if char == "(" else -1
            elif not quoted and depth <= 0 and char == ",":
                items.append(line[start:i].strip())
                start = i + 1
    return [item for item in items if item] or ["*"]


def _status_of(plane: Plane, spec: StreamSpec) -> dict[str, Any]:
    """The status as the API answers it, each output with its latest rewind and backfill (the
    page's progress of a replay)."""
    status = stream_status(plane.settings, plane.store, spec)
    return status.model_dump(mode="json", exclude_unset=True, by_alias=True)


def _explain(error: Exception, prefix: str = "") -> tuple[str, dict[str, str]]:
    """A form's error: the message, and per form field what is wrong with it."""
    if isinstance(error, ValidationError):
        problems = field_errors(error)
        message = "Please correct the fields marked below."
    elif isinstance(error, InvalidSpec):
        problems = error.details.get("problems", [])
        message = error.message
    else:
        return str(error), {}
    by_field: dict[str, str] = {}
    for problem in problems:
        field = problem["field"].removeprefix(prefix)
        key = field.split(".")[0]
        if key == "delivery":
            key = field.split(".")[1] if field.count(".") else "mode"
        if key == "sink":
            key = "target" if field.count(".") > 1 else "sink"
        by_field.setdefault(key, problem["message"])
    return message, by_field


def _status(error: Exception) -> int:
    return error.status if isinstance(error, KeystoneError) else 422
