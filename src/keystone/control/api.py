"""The control REST API: routes thin over `Streams`, `Accounts`, preview and status. Paths are
the design's contracts; every route needs `Authorization: Bearer <admin or owner token>`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from keystone.contracts.errors import InvalidSpec, NotFound
from keystone.contracts.spec import OutputSpec, StreamSpec
from keystone.control.gate import CALLER, StrictJSONRoute
from keystone.control.lineage import lineage
from keystone.control.models import (
    AppCreate,
    AppKey,
    AppPublic,
    AuditPublic,
    BackfillPublic,
    BackfillRequest,
    DeadLettersPublic,
    FrontingPublic,
    FrontingSwitch,
    KafkaCredential,
    LineagePublic,
    OwnerCreate,
    OwnerToken,
    PreviewPublic,
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
    SilenceCreate,
    SilencePublic,
    StatusPublic,
    StreamPublic,
)
from keystone.control.plane import Plane
from keystone.control.preview import preview
from keystone.control.status import stream_status
from keystone.control.streams import Applied
from keystone.control.tenancy import Caller
from keystone.dashboards.grafana import dashboard


def get_plane(request: Request) -> Plane:
    return request.app.state.plane


def get_caller(request: Request) -> Caller:
    """The caller the gate authenticated before the body was read (`control.gate`)."""
    return request.scope[CALLER]


PlaneDep = Annotated[Plane, Depends(get_plane)]
CallerDep = Annotated[Caller, Depends(get_caller)]

router = APIRouter(prefix="/v1", route_class=StrictJSONRoute)


def _public(plane: Plane, applied: Applied) -> StreamPublic:
    assert applied.spec is not None
    return StreamPublic.of(
        applied.spec, plane.store.router_state(applied.spec.name), applied.provisioned
    )


# Streams


@router.get("/streams", response_model=list[StreamPublic], tags=["streams"])
def list_streams(plane: PlaneDep, who: CallerDep) -> list[StreamPublic]:
    states = plane.store.router_states()
    return [StreamPublic.of(s, states.get(s.name)) for s in plane.streams.list(who)]


@router.post("/streams", response_model=StreamPublic, status_code=201, tags=["streams"])
def create_stream(spec: StreamSpec, plane: PlaneDep, who: CallerDep) -> StreamPublic:
    """Checks the spec, provisions what it writes to, stores it; the fleet deploys its router."""
    return _public(plane, plane.streams.create(who, spec))


@router.get("/streams/{stream}", response_model=StreamPublic, tags=["streams"])
def get_stream(stream: str, plane: PlaneDep, who: CallerDep) -> StreamPublic:
    return StreamPublic.of(plane.streams.get(who, stream), plane.store.router_state(stream))


@router.put("/streams/{stream}", response_model=StreamPublic, tags=["streams"])
def put_stream(
    stream: str,
    spec: StreamSpec,
    plane: PlaneDep,
    who: CallerDep,
    response: Response,
    force: Annotated[
        bool,
        Query(
            description="Apply a new schema even where it removes or retypes a field an output "
            "reads (else 409, naming each output and field)."
        ),
    ] = False,
) -> StreamPublic:
    """Creates the stream or replaces its spec (the router is redeployed if it changed)."""
    applied = plane.streams.put(who, stream, spec, force)
    if applied.created:
        response.status_code = 201
    return _public(plane, applied)


@router.delete("/streams/{stream}", status_code=204, tags=["streams"])
def delete_stream(stream: str, plane: PlaneDep, who: CallerDep) -> None:
    """Stops the stream's router and forgets the stream; its topics, tables and indices stay."""
    plane.streams.delete(who, stream)


@router.put("/streams/{stream}/outputs/{output}", response_model=StreamPublic, tags=["outputs"])
def put_output(
    stream: str, output: str, body: OutputSpec, plane: PlaneDep, who: CallerDep
) -> StreamPublic:
    """Adds the output or changes it."""
    if body.name != output:
        raise InvalidSpec(
            "the output's name must be the one in the path",
            problems=[{"field": "name", "message": f"expected {output!r}"}],
        )
    return _public(plane, plane.streams.put_output(who, stream, body))


@router.delete("/streams/{stream}/outputs/{output}", response_model=StreamPublic, tags=["outputs"])
def delete_output(stream: str, output: str, plane: PlaneDep, who: CallerDep) -> StreamPublic:
    return _public(plane, plane.streams.delete_output(who, stream, output))


@router.put("/streams/{stream}/producers/{app}", response_model=StreamPublic, tags=["apps"])
def grant(stream: str, app: str, plane: PlaneDep, who: CallerDep) -> StreamPublic:
    """Lets the app post events to the stream."""
    return _public(plane, plane.streams.grant(who, stream, app))


@router.delete("/streams/{stream}/producers/{app}", response_model=StreamPublic, tags=["apps"])
def revoke(stream: str, app: str, plane: PlaneDep, who: CallerDep) -> StreamPublic:
    return _public(plane, plane.streams.revoke(who, stream, app))


# Unset fields stay out, as the status has always been answered: a router without a state
# says only which.
@router.get(
    "/streams/{stream}/status",
    response_model=StatusPublic,
    response_model_exclude_unset=True,
    tags=["streams"],
)
def status(stream: str, plane: PlaneDep, who: CallerDep) -> StatusPublic:
    """The router's state (running, restarting, failed with the last error...) and per output
    its rates (events/s over the last minute), lag and p99 delivery latency."""
    return stream_status(plane.settings, plane.store, plane.streams.get(who, stream))


@router.get("/streams/{stream}/lineage", response_model=LineagePublic, tags=["streams"])
def stream_lineage(stream: str, plane: PlaneDep, who: CallerDep) -> LineagePublic:
    """Which outputs (and running shadows of outputs) read which of the stream's fields (in
    their filters and projections), beside its schema: the fields no output reads, and those
    outputs read that it does not declare."""
    spec = plane.streams.get(who, stream)
    return LineagePublic.of(lineage(spec, plane.shadows.versions_running(spec.name)))


@router.get("/streams/{stream}/dashboard", tags=["streams"])
def grafana_dashboard(stream: str, plane: PlaneDep, who: CallerDep) -> dict:
    """The stream's Grafana dashboard model, importable as is (its data source is a variable)."""
    return dashboard(plane.streams.get(who, stream))


@router.post(
    "/streams/{stream}/outputs/{output}/preview", response_model=PreviewPublic, tags=["outputs"]
)
def preview_output(
    stream: str, output: str, body: PreviewRequest, plane: PlaneDep, who: CallerDep
) -> PreviewPublic:
    """What the output would deliver of the stream's newest events: its own filter and
    projection, its running shadow's (`shadow`), or the ones in the body (try them before
    deploying)."""
    spec = plane.streams.get(who, stream)
    existing = spec.output(output)
    if body.shadow:
        existing = plane.shadows.version_running(who, stream, output)
    if existing is None and body.filter is None and body.projection is None:
        raise NotFound(f"stream {stream!r} has no output {output!r}: give a filter or projection")
    filter_text = body.filter if body.filter is not None else getattr(existing, "filter", None)
    projection = body.projection
    if projection is None:
        projection = existing.projection if existing else ["*"]
    drafted = body.filter is not None or body.projection is not None
    limits = plane.settings if drafted else None
    key = plane.store.specs.ensure_hashing_key(stream)
    result = preview(plane.settings, spec, filter_text or None, projection, body.limit, limits, key)
    return PreviewPublic(**result.__dict__)


# Recovery


@router.get(
    "/streams/{stream}/outputs/{output}/restore-points",
    response_model=list[RestorePointPublic],
    tags=["recovery"],
)
def restore_points(
    stream: str, output: str, plane: PlaneDep, who: CallerDep
) -> list[RestorePointPublic]:
    """The positions the output has committed, newest first: every one of the last hour, then
    one per five minutes, for the stream's recovery.keep."""
    points = plane.rewinds.restore_points(who, stream, output)
    return [RestorePointPublic.of(p) for p in points]


@router.post(
    "/streams/{stream}/outputs/{output}/rewind",
    response_model=RewindPublic,
    status_code=202,
    tags=["recovery"],
)
def rewind(
    stream: str,
    output: str,
    body: RewindRequest,
    plane: PlaneDep,
    who: CallerDep,
    response: Response,
) -> RewindPublic:
    """Takes this output (only) back to a restore point, a time or offsets: its router replays
    from there at the stream's recovery rate. With dry_run, only says what it would do, per
    sink (200)."""
    plan = plane.rewinds.plan(who, stream, output, body.target(), body.max_events_per_second)
    if body.dry_run:
        response.status_code = 200
        return RewindPublic.of_plan(stream, plan, started=False)
    return RewindPublic.of_plan(stream, plane.rewinds.start(who, plan), started=True)


@router.get(
    "/streams/{stream}/outputs/{output}/rewind", response_model=RewindPublic, tags=["recovery"]
)
def rewind_progress(stream: str, output: str, plane: PlaneDep, who: CallerDep) -> RewindPublic:
    """The output's latest rewind: replaying (events replayed of all, ETA) or caught up."""
    return RewindPublic.of_progress(stream, plane.rewinds.progress(who, stream, output))


@router.get("/streams/{stream}/dead-letters", response_model=DeadLettersPublic, tags=["recovery"])
def dead_letters(stream: str, plane: PlaneDep, who: CallerDep) -> DeadLettersPublic:
    """The stream's dead letters grouped by the output that refused them ('_stream': the
    stream could not read them) and reason, most first: counts, first and last, samples, and
    how many a redrive has sent again."""
    return DeadLettersPublic.of(stream, plane.dead_letters.groups(who, stream))


@router.post(
    "/streams/{stream}/dead-letters/redrive",
    response_model=RedrivePublic,
    status_code=202,
    tags=["recovery"],
)
def redrive(
    stream: str, body: RedriveRequest, plane: PlaneDep, who: CallerDep, response: Response
) -> RedrivePublic:
    """Sends the dead letters the selection matches (and no redrive sent before) again through
    the stream's current spec, each only to the outputs it failed in, as an application of its
    own at the stream's recovery rate. With dry_run, only counts them (200); a selection that
    matches nothing is a redrive of none."""
    plan = plane.redrives.plan(who, stream, body.selection(), body.max_events_per_second)
    if body.dry_run:
        response.status_code = 200
        return RedrivePublic.of_plan(stream, plan, started=False)
    plan = plane.redrives.start(who, plan)
    if not plan.redrive.active:  # it matched nothing: done already
        response.status_code = 200
    return RedrivePublic.of_plan(stream, plan, started=True)


@router.get(
    "/streams/{stream}/dead-letters/redrive", response_model=RedrivePublic, tags=["recovery"]
)
def redrive_progress(stream: str, plane: PlaneDep, who: CallerDep) -> RedrivePublic:
    """The stream's latest redrive: dead letters sent of all, per output, ETA; or its end."""
    return RedrivePublic.of_view(stream, plane.redrives.view(who, stream))


@router.delete(
    "/streams/{stream}/dead-letters/redrive",
    response_model=RedrivePublic,
    status_code=202,
    tags=["recovery"],
)
def redrive_cancel(stream: str, plane: PlaneDep, who: CallerDep) -> RedrivePublic:
    """Stops the stream's redrive: the slices sent stay sent (and marked)."""
    plane.redrives.cancel(who, stream)
    return RedrivePublic.of_view(stream, plane.redrives.view(who, stream))


@router.post(
    "/streams/{stream}/outputs/{output}/backfill",
    response_model=BackfillPublic,
    status_code=202,
    tags=["recovery"],
)
def backfill(
    stream: str,
    output: str,
    body: BackfillRequest,
    plane: PlaneDep,
    who: CallerDep,
    response: Response,
) -> BackfillPublic:
    """Routes the events ingested in [from, to) again from the stream's archive through this
    output as it is now, as an application of its own beside the router, at the stream's
    recovery rate. With dry_run, only says what it would do (200)."""
    args = (who, stream, output, body.start, body.end, body.max_events_per_second)
    plan = plane.backfills.plan(*args)
    if body.dry_run:
        response.status_code = 200
        return BackfillPublic.of_plan(stream, plan, started=False)
    return BackfillPublic.of_plan(stream, plane.backfills.start(who, plan), started=True)


@router.get(
    "/streams/{stream}/outputs/{output}/backfill",
    response_model=BackfillPublic,
    tags=["recovery"],
)
def backfill_progress(stream: str, output: str, plane: PlaneDep, who: CallerDep) -> BackfillPublic:
    """The output's latest backfill: events routed of all, hours done, ETA; or how it ended."""
    view = plane.backfills.view(who, stream, output)
    return BackfillPublic.of_view(stream, view)


@router.delete(
    "/streams/{stream}/outputs/{output}/backfill",
    response_model=BackfillPublic,
    status_code=202,
    tags=["recovery"],
)
def backfill_cancel(stream: str, output: str, plane: PlaneDep, who: CallerDep) -> BackfillPublic:
    """Stops the output's backfill: the hours it has done stay done; a Hive hour under way is
    left as it was."""
    plane.backfills.cancel(who, stream, output)
    view = plane.backfills.view(who, stream, output)
    return BackfillPublic.of_view(stream, view)


# Shadows


@router.post(
    "/streams/{stream}/outputs/{output}/shadow",
    response_model=ShadowPublic,
    status_code=202,
    tags=["shadows"],
)
def shadow(
    stream: str, output: str, body: ShadowRequest, plane: PlaneDep, who: CallerDep
) -> ShadowPublic:
    """Runs a changed version of this output beside it, on the same events from where it has
    got to, into targets of its own, comparing the two event by event; one a time per output,
    each counted as one more of the stream's outputs until it ends."""
    asked = (body.output, body.expires_in, body.max_events_per_second)
    return ShadowPublic.of(stream, plane.shadows.start(who, stream, output, *asked))


@router.get(
    "/streams/{stream}/outputs/{output}/shadow", response_model=ShadowPublic, tags=["shadows"]
)
def shadow_view(stream: str, output: str, plane: PlaneDep, who: CallerDep) -> ShadowPublic:
    """The output's latest shadow and how its records compare with the live output's."""
    return ShadowPublic.of(stream, plane.shadows.view(who, stream, output))


@router.post(
    "/streams/{stream}/outputs/{output}/shadow/promote",
    response_model=ShadowPublic,
    status_code=202,
    tags=["shadows"],
)
def shadow_promote(stream: str, output: str, plane: PlaneDep, who: CallerDep) -> ShadowPublic:
    """Makes the running shadow's version the output's, from where the output's query has
    committed to (its router is deployed again), and ends the shadow: its targets go."""
    return ShadowPublic.of(stream, plane.shadows.promote(who, stream, output))


@router.delete(
    "/streams/{stream}/outputs/{output}/shadow",
    response_model=ShadowPublic,
    status_code=202,
    tags=["shadows"],
)
def shadow_drop(stream: str, output: str, plane: PlaneDep, who: CallerDep) -> ShadowPublic:
    """Ends the running shadow, the output unchanged: its query stops, its targets go."""
    return ShadowPublic.of(stream, plane.shadows.drop(who, stream, output))


# Apps


@router.post("/apps", response_model=AppKey, status_code=201, tags=["apps"])
def create_app(body: AppCreate, plane: PlaneDep, who: CallerDep) -> AppKey:
    """Registers a producing app; its key is in this answer only."""
    key, rate = plane.accounts.create_app(who, body.name, body.rate)
    return AppKey(name=body.name, key=key, rate=rate)


@router.get("/apps", response_model=list[AppPublic], tags=["apps"])
def list_apps(plane: PlaneDep, who: CallerDep) -> list[AppPublic]:
    streams = plane.store.streams()
    return [AppPublic.seen_by(a, streams, who) for a in plane.accounts.apps(who)]


@router.post("/apps/{app}/key", response_model=AppKey, tags=["apps"])
def rotate_app(app: str, plane: PlaneDep, who: CallerDep) -> AppKey:
    """A new key; the old one stops working within a second. An app that holds a Kafka
    credential gets a new password too, and its old one stops working at once."""
    key, kafka_password = plane.accounts.rotate_app(who, app)
    return AppKey(name=app, key=key, kafka_password=kafka_password)


@router.post("/apps/{app}/kafka-credential", response_model=KafkaCredential, tags=["apps"])
def issue_kafka_credential(app: str, plane: PlaneDep, who: CallerDep) -> KafkaCredential:
    """The app's own Kafka user, to write straight to the fronting topics of the streams it is
    granted (on a cluster with SCRAM logins; else 409). Its password is in this answer only;
    asked again, the app gets a new one and the old one stops working."""
    password = plane.accounts.issue_kafka(who, app)
    return KafkaCredential.of(app, password, plane.settings, plane.store.streams())


@router.delete("/apps/{app}/kafka-credential", status_code=204, tags=["apps"])
def revoke_kafka_credential(app: str, plane: PlaneDep, who: CallerDep) -> None:
    """Deletes the app's Kafka user and its ACLs; its key is untouched."""
    plane.accounts.revoke_kafka(who, app)


@router.delete("/apps/{app}", status_code=204, tags=["apps"])
def delete_app(app: str, plane: PlaneDep, who: CallerDep) -> None:
    """Revokes the app: its key stops working and it leaves every stream's producers."""
    plane.accounts.delete_app(who, app)


# Alert receivers


@router.post("/receivers", response_model=ReceiverPublic, status_code=201, tags=["alerts"])
def add_receiver(body: ReceiverCreate, plane: PlaneDep, who: CallerDep) -> ReceiverPublic:
    """Registers where the caller's streams' alerts go. A webhook's URL is checked against
    alert_receiver_schemes and alert_receiver_networks (422 naming the one that refuses it),
    and is never shown again: answers give its scheme and host."""
    return ReceiverPublic.of(plane.receivers.add(who, body.receiver()))


@router.get("/receivers", response_model=list[ReceiverPublic], tags=["alerts"])
def list_receivers(plane: PlaneDep, who: CallerDep) -> list[ReceiverPublic]:
    """The caller's receivers (the admin's view: every owner's)."""
    return [ReceiverPublic.of(r) for r in plane.receivers.list(who)]


@router.delete("/receivers/{name}", status_code=204, tags=["alerts"])
def remove_receiver(name: str, plane: PlaneDep, who: CallerDep, owner: str | None = None) -> None:
    """Removes one of the caller's receivers (the admin: of `owner`)."""
    plane.receivers.remove(who, name, owner)


@router.post(
    "/streams/{stream}/silences", response_model=SilencePublic, status_code=201, tags=["alerts"]
)
def add_silence(stream: str, body: SilenceCreate, plane: PlaneDep, who: CallerDep) -> SilencePublic:
    """Silences the stream's alerts (one of them, by name) for a while: Alertmanager notifies
    nobody of them meanwhile; the dashboards show them silenced."""
    silence_id = plane.silences.add(who, stream, body.alert, body.hours, body.comment)
    return SilencePublic.of(stream, plane.silences.alertmanager.silence(silence_id))


@router.get("/streams/{stream}/silences", response_model=list[SilencePublic], tags=["alerts"])
def list_silences(stream: str, plane: PlaneDep, who: CallerDep) -> list[SilencePublic]:
    """The stream's silences not yet expired."""
    return [SilencePublic.of(stream, s) for s in plane.silences.list(who, stream)]


@router.delete("/streams/{stream}/silences/{silence}", status_code=204, tags=["alerts"])
def expire_silence(stream: str, silence: str, plane: PlaneDep, who: CallerDep) -> None:
    """Ends one of the stream's silences now."""
    plane.silences.expire(who, stream, silence)


# Fronting clusters


@router.get("/fronting", response_model=FrontingPublic, tags=["fronting"])
def get_fronting(plane: PlaneDep, who: CallerDep) -> FrontingPublic:
    """The fronting Kafka clusters, whether each can take writes now, and which takes whose."""
    return FrontingPublic.of(plane.fronting.view(who))


@router.post("/fronting/switch", response_model=FrontingPublic, tags=["fronting"])
def switch_fronting(body: FrontingSwitch, plane: PlaneDep, who: CallerDep) -> FrontingPublic:
    """Moves every stream's writes (or one stream's) to a cluster, or back home (the admin's):
    producers follow within seconds; routers read every cluster, so nothing is left behind."""
    return FrontingPublic.of(plane.fronting.switch(who, body.to, body.stream))


# Owners (the admin's)


@router.post("/owners", response_model=OwnerToken, status_code=201, tags=["owners"])
def create_owner(body: OwnerCreate, plane: PlaneDep, who: CallerDep) -> OwnerToken:
    return OwnerToken(name=body.name, token=plane.accounts.create_owner(who, body.name))


@router.get("/owners", response_model=list[str], tags=["owners"])
def list_owners(plane: PlaneDep, who: CallerDep) -> list[str]:
    return plane.accounts.owners(who)


@router.post("/owners/{owner}/token", response_model=OwnerToken, tags=["owners"])
def rotate_owner(owner: str, plane: PlaneDep, who: CallerDep) -> OwnerToken:
    return OwnerToken(name=owner, token=plane.accounts.rotate_owner(who, owner))


@router.delete("/owners/{owner}", status_code=204, tags=["owners"])
def delete_owner(owner: str, plane: PlaneDep, who: CallerDep) -> None:
    plane.accounts.delete_owner(who, owner)


# Audit


@router.get("/audit", response_model=list[AuditPublic], tags=["audit"])
def audit_log(
    plane: PlaneDep, who: CallerDep, limit: Annotated[int, Query(ge=1, le=10000)] = 100
) -> list[AuditPublic]:
    """Who changed what, newest first: everything for the admin, an owner's own for owners."""
    # An owner's: the entries on what was theirs when it changed, kept apart for them.
    entries = plane.store.audit.entries(limit, owner=None if who.admin else who.name)
    return [AuditPublic.of(e) for e in entries]
