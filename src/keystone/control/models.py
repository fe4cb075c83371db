"""The control API's bodies: what comes in (…Create, …Request) and what goes out (…Public).
The stream spec itself is the shared contract (`contracts.spec`)."""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, Field

from keystone.contracts.registry import App, RouterPhase, RouterState
from keystone.contracts.spec import Principal, StreamSpec
from keystone.control.store import AuditEntry
from keystone.control.tenancy import Caller


class RouterPublic(BaseModel):
    # A string, not the enum: a client reads a state it does not know yet (a newer control's).
    state: str = Field(description="none, pending, starting, running, stopping, restarting, failed")
    pid: int | None = None
    for_seconds: float | None = Field(None, description="How long it has been in this state.")
    restarts: int = 0
    last_error: str | None = None
    retry_in_seconds: float | None = None

    @classmethod
    def of(cls, state: RouterState | None, has_outputs: bool) -> RouterPublic:
        """The fleet's record, as owners see it; without one, only whether a router is due."""
        if state is None:
            return cls(state=RouterPhase.PENDING if has_outputs else RouterPhase.NONE)
        now = time.time()
        retry = {}
        if state.state in (RouterPhase.RESTARTING, RouterPhase.FAILED):
            retry["retry_in_seconds"] = max(0.0, round(state.retry_at - now, 1))
        return cls(
            state=state.state,
            pid=state.pid or None,
            for_seconds=round(now - state.since, 1) if state.since else None,
            restarts=state.restarts,
            last_error=state.last_error or None,
            **retry,
        )


class StreamPublic(BaseModel):
    spec: StreamSpec = Field(description="The stream spec as stored.")
    router: RouterPublic
    provisioned: list[str] = Field(
        default_factory=list, description="What this change created: topics, templates..."
    )

    @classmethod
    def of(
        cls, spec: StreamSpec, state: RouterState | None, provisioned: list[str] | None = None
    ) -> StreamPublic:
        return cls(
            spec=spec,
            router=RouterPublic.of(state, bool(spec.outputs)),
            provisioned=provisioned or [],
        )


class OutputStatusPublic(BaseModel):
    name: str
    sink: str = Field(description="The sink's type.")
    rates: dict[str, float] = Field(
        default_factory=dict, description="Events per second per stage, over the last minute."
    )
    totals: dict[str, float] = Field(
        default_factory=dict, description="Events per stage since the router started."
    )
    lag: float | None = Field(None, description="Records behind the fronting topic's end.")
    latency_p99: float | None = Field(None, description="Delivery latency's p99, seconds.")


class StatusPublic(BaseModel):
    """A stream's router, as the fleet sees it, and its outputs as Prometheus last scraped
    them (an output's figures are missing until the router has run)."""

    stream: str
    router: RouterPublic
    outputs: list[OutputStatusPublic]
    metrics_error: str | None = Field(None, description="Why the figures are missing, if so.")


class AppCreate(BaseModel):
    name: Principal
    rate: int | None = Field(
        None,
        ge=0,
        description="Quota in events per second. Default: none (0) for the admin's apps, "
        "max_app_rate for an owner's; only the admin may give 0 (none).",
    )


class AppPublic(BaseModel):
    name: str
    owner: str
    rate: int
    created: float
    streams: list[str] = Field(description="Streams it may post to.")

    @classmethod
    def of(cls, app: App, streams: list[StreamSpec]) -> AppPublic:
        return cls(
            name=app.name,
            owner=app.owner or "admin",
            rate=app.rate,
            created=app.created,
            streams=[s.name for s in streams if app.name in s.producers],
        )

    @classmethod
    def seen_by(cls, app: App, streams: list[StreamSpec], caller: Caller) -> AppPublic:
        """The app with only the grants of streams the caller owns: another owner's stream
        that lets the app post is theirs to know of."""
        return cls.of(app, [s for s in streams if caller.owns(s.owner)])


class AppKey(BaseModel):
    name: str
    key: str = Field(description="Shown only now: it is stored hashed.")
    rate: int | None = None


class OwnerCreate(BaseModel):
    name: Principal


class OwnerToken(BaseModel):
    name: str
    token: str = Field(description="Shown only now: it is stored hashed.")


class PreviewRequest(BaseModel):
    filter: str | None = Field(None, description="Default: the output's, if it exists.")
    projection: list[str] | None = Field(
        None, min_length=1, description="Default: the output's, or *."
    )
    limit: int = Field(20, ge=1, le=1000, description="How many of the newest events to read.")


class PreviewPublic(BaseModel):
    scanned: int
    matched: int
    unreadable: int
    records: list[dict[str, Any]]
    problems: list[dict[str, Any]]


class AuditPublic(BaseModel):
    id: str
    at: float
    who: str
    action: str
    target: str
    owner: str = Field(description="Whose the target was when it changed.")
    detail: dict[str, Any]

    @classmethod
    def of(cls, entry: AuditEntry) -> AuditPublic:
        return cls(**entry.__dict__)
