"""A client of the control API, for the `keystone` command, tools and tests. Answers come back
as the API's own models (`control.models`: each route's response_model); errors as the
KeystoneError the service raised: same status, message and details."""

from __future__ import annotations

from typing import Any, TypeVar

import httpx
from pydantic import TypeAdapter, ValidationError

from keystone.contracts.errors import KeystoneError, Unauthorized, Unavailable
from keystone.contracts.settings import Settings
from keystone.contracts.spec import field_errors
from keystone.control.models import (
    AppKey,
    AppPublic,
    AuditPublic,
    BackfillPublic,
    DeadLettersPublic,
    FrontingPublic,
    KafkaCredential,
    LineagePublic,
    OwnerToken,
    PreviewPublic,
    ReceiverPublic,
    RedrivePublic,
    RestorePointPublic,
    RewindPublic,
    ShadowPublic,
    SilencePublic,
    StatusPublic,
    StreamPublic,
)
from keystone.control.tenancy import admin_token

T = TypeVar("T")
# The answers' models, as control/api.py declares them (response_model), built once.
_STREAM = TypeAdapter(StreamPublic)
_STATUS = TypeAdapter(StatusPublic)
_STREAMS = TypeAdapter(list[StreamPublic])
_PREVIEW = TypeAdapter(PreviewPublic)
_LINEAGE = TypeAdapter(LineagePublic)
_APP_KEY = TypeAdapter(AppKey)
_APPS = TypeAdapter(list[AppPublic])
_KAFKA_CREDENTIAL = TypeAdapter(KafkaCredential)
_OWNER_TOKEN = TypeAdapter(OwnerToken)
_OWNERS = TypeAdapter(list[str])
_AUDIT = TypeAdapter(list[AuditPublic])
_POINTS = TypeAdapter(list[RestorePointPublic])
_BACKFILL = TypeAdapter(BackfillPublic)
_DEAD_LETTERS = TypeAdapter(DeadLettersPublic)
_REDRIVE = TypeAdapter(RedrivePublic)
_REWIND = TypeAdapter(RewindPublic)
_FRONTING = TypeAdapter(FrontingPublic)
_RECEIVER = TypeAdapter(ReceiverPublic)
_RECEIVERS = TypeAdapter(list[ReceiverPublic])
_SHADOW = TypeAdapter(ShadowPublic)
_SILENCE = TypeAdapter(SilencePublic)
_SILENCES = TypeAdapter(list[SilencePublic])


class ControlError(KeystoneError):
    """An error the control service answered with."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        details = {k: v for k, v in body.items() if k not in ("error", "message")}
        super().__init__(body.get("message") or f"control answered {status}", **details)
        self.status = status  # type: ignore[misc]  # the instance's, not the class's
        self.kind = body.get("error", "")


class UnreadableAnswer(KeystoneError):
    """A success answer that is not the model its route declares (a control of another
    version, say): which fields, and why."""


class ControlClient:
    """Calls one control process of `urls` (one URL, or the replicas' in order): a request that
    could not connect goes to the next, which is then asked first. Only a refused connection
    moves on: a request that reached a process is never sent twice."""

    def __init__(self, urls: str | list[str], token: str, timeout: float = 60) -> None:
        self.urls = [u.rstrip("/") for u in ([urls] if isinstance(urls, str) else urls)]
        self.token = token
        self._http = httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=timeout)

    @property
    def url(self) -> str:
        """The control process asked first."""
        return self.urls[0]

    @classmethod
    def from_settings(cls, settings: Settings) -> ControlClient:
        """Control's address from settings; the token from KEYSTONE_TOKEN, else the admin's
        from the state directory (when this user can read it)."""
        token = settings.token.get_secret_value() or admin_token(settings)
        if not token:
            raise Unauthorized(
                "no token: set KEYSTONE_TOKEN to yours (an owner's, or the admin's from "
                f"{settings.admin_token_file})"
            )
        return cls(settings.control_urls, token)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def call(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        """The answer's JSON as it came (None for 204), for routes without a model."""
        answer = self._send(method, path, body, params)
        if answer.status_code == 204:
            return None
        try:
            data = answer.json()
        except ValueError:
            data = {"message": answer.text[:500]}
        if answer.status_code >= 400:
            raise ControlError(answer.status_code, data if isinstance(data, dict) else {})
        return data

    def _send(self, method: str, path: str, body: Any, params: dict[str, Any]) -> httpx.Response:
        refused: list[str] = []
        for url in self.urls:
            try:
                answer = self._http.request(
                    method, f"{url}{path}", json=body, params=params or None
                )
            except (httpx.ConnectError, httpx.ConnectTimeout) as e:
                # Never reached it: the next replica may answer.
                refused.append(f"{url} ({e})")
                continue
            except httpx.TransportError as e:
                raise Unavailable(
                    f"control at {url} did not answer ({e}): ask again", retry_after=2
                ) from e
            self.urls = [url, *(u for u in self.urls if u != url)]
            return answer
        raise Unavailable(
            f"control is unreachable at {', '.join(refused)}: is the stack up? (keystone stack up)",
            retry_after=2,
        )

    def _read(
        self, model: TypeAdapter[T], method: str, path: str, body: Any = None, **params: Any
    ) -> T:
        """`call`, its answer parsed as the route's model."""
        data = self.call(method, path, body, **params)
        try:
            return model.validate_python(data)
        except ValidationError as e:
            raise UnreadableAnswer(
                f"control's answer to {method} {path} is not the {e.title} this client reads",
                problems=field_errors(e),
            ) from e

    # Streams and outputs

    def streams(self) -> list[StreamPublic]:
        return self._read(_STREAMS, "GET", "/v1/streams")

    def stream(self, name: str) -> StreamPublic:
        return self._read(_STREAM, "GET", f"/v1/streams/{name}")

    def create_stream(self, spec: dict) -> StreamPublic:
        return self._read(_STREAM, "POST", "/v1/streams", spec)

    def put_stream(self, spec: dict, force: bool = False) -> StreamPublic:
        """`force`: apply a new schema that breaks what an output reads (else 409)."""
        params = {"force": "true"} if force else {}
        return self._read(_STREAM, "PUT", f"/v1/streams/{spec['name']}", spec, **params)

    def lineage(self, name: str) -> LineagePublic:
        return self._read(_LINEAGE, "GET", f"/v1/streams/{name}/lineage")

    def delete_stream(self, name: str) -> None:
        self.call("DELETE", f"/v1/streams/{name}")

    def status(self, name: str) -> StatusPublic:
        return self._read(_STATUS, "GET", f"/v1/streams/{name}/status")

    def put_output(self, stream: str, output: dict) -> StreamPublic:
        return self._read(_STREAM, "PUT", f"/v1/streams/{stream}/outputs/{output['name']}", output)

    def delete_output(self, stream: str, output: str) -> StreamPublic:
        return self._read(_STREAM, "DELETE", f"/v1/streams/{stream}/outputs/{output}")

    def preview(self, stream: str, output: str, **draft: Any) -> PreviewPublic:
        return self._read(_PREVIEW, "POST", f"/v1/streams/{stream}/outputs/{output}/preview", draft)

    # Recovery

    def restore_points(self, stream: str, output: str) -> list[RestorePointPublic]:
        return self._read(_POINTS, "GET", f"/v1/streams/{stream}/outputs/{output}/restore-points")

    def rewind(self, stream: str, output: str, request: dict[str, Any]) -> RewindPublic:
        """`request`: a `RewindRequest`'s fields (restore_point, to or offsets; dry_run...)."""
        return self._read(_REWIND, "POST", f"/v1/streams/{stream}/outputs/{output}/rewind", request)

    def rewind_progress(self, stream: str, output: str) -> RewindPublic:
        return self._read(_REWIND, "GET", f"/v1/streams/{stream}/outputs/{output}/rewind")

    def backfill(self, stream: str, output: str, request: dict[str, Any]) -> BackfillPublic:
        """`request`: a `BackfillRequest`'s fields (from, to, max_events_per_second, dry_run)."""
        path = f"/v1/streams/{stream}/outputs/{output}/backfill"
        return self._read(_BACKFILL, "POST", path, request)

    def backfill_progress(self, stream: str, output: str) -> BackfillPublic:
        return self._read(_BACKFILL, "GET", f"/v1/streams/{stream}/outputs/{output}/backfill")

    def cancel_backfill(self, stream: str, output: str) -> BackfillPublic:
        return self._read(_BACKFILL, "DELETE", f"/v1/streams/{stream}/outputs/{output}/backfill")

    # Dead letters

    def shadow(self, stream: str, request: dict[str, Any]) -> ShadowPublic:
        """`request`: a `ShadowRequest`'s fields (output, hours, max_events_per_second)."""
        path = f"/v1/streams/{stream}/outputs/{request['output']['name']}/shadow"
        return self._read(_SHADOW, "POST", path, request)

    def shadow_view(self, stream: str, output: str) -> ShadowPublic:
        return self._read(_SHADOW, "GET", f"/v1/streams/{stream}/outputs/{output}/shadow")

    def promote_shadow(self, stream: str, output: str) -> ShadowPublic:
        path = f"/v1/streams/{stream}/outputs/{output}/shadow/promote"
        return self._read(_SHADOW, "POST", path)

    def drop_shadow(self, stream: str, output: str) -> ShadowPublic:
        return self._read(_SHADOW, "DELETE", f"/v1/streams/{stream}/outputs/{output}/shadow")

    def dead_letters(self, stream: str) -> DeadLettersPublic:
        return self._read(_DEAD_LETTERS, "GET", f"/v1/streams/{stream}/dead-letters")

    def redrive(self, stream: str, request: dict[str, Any]) -> RedrivePublic:
        """`request`: a `RedriveRequest`'s fields (reason, output, from, to, dry_run...)."""
        path = f"/v1/streams/{stream}/dead-letters/redrive"
        return self._read(_REDRIVE, "POST", path, request)

    def redrive_progress(self, stream: str) -> RedrivePublic:
        return self._read(_REDRIVE, "GET", f"/v1/streams/{stream}/dead-letters/redrive")

    def cancel_redrive(self, stream: str) -> RedrivePublic:
        return self._read(_REDRIVE, "DELETE", f"/v1/streams/{stream}/dead-letters/redrive")

    # Alert receivers

    def add_receiver(self, request: dict[str, Any]) -> ReceiverPublic:
        """`request`: a `ReceiverCreate`'s fields."""
        return self._read(_RECEIVER, "POST", "/v1/receivers", request)

    def receivers(self) -> list[ReceiverPublic]:
        return self._read(_RECEIVERS, "GET", "/v1/receivers")

    def remove_receiver(self, name: str, owner: str | None = None) -> None:
        query = f"?owner={owner}" if owner else ""
        self.call("DELETE", f"/v1/receivers/{name}{query}")

    def add_silence(self, stream: str, request: dict[str, Any]) -> SilencePublic:
        """`request`: a `SilenceCreate`'s fields."""
        return self._read(_SILENCE, "POST", f"/v1/streams/{stream}/silences", request)

    def silences(self, stream: str) -> list[SilencePublic]:
        return self._read(_SILENCES, "GET", f"/v1/streams/{stream}/silences")

    def expire_silence(self, stream: str, silence: str) -> None:
        self.call("DELETE", f"/v1/streams/{stream}/silences/{silence}")

    # Apps and owners

    def create_app(self, name: str, rate: int | None = None) -> AppKey:
        """`rate` None: control's default quota for the caller (`AppCreate`)."""
        return self._read(_APP_KEY, "POST", "/v1/apps", {"name": name, "rate": rate})

    def apps(self) -> list[AppPublic]:
        return self._read(_APPS, "GET", "/v1/apps")

    def rotate_app(self, name: str) -> AppKey:
        return self._read(_APP_KEY, "POST", f"/v1/apps/{name}/key")

    def delete_app(self, name: str) -> None:
        self.call("DELETE", f"/v1/apps/{name}")

    def issue_kafka_credential(self, name: str) -> KafkaCredential:
        return self._read(_KAFKA_CREDENTIAL, "POST", f"/v1/apps/{name}/kafka-credential")

    def revoke_kafka_credential(self, name: str) -> None:
        self.call("DELETE", f"/v1/apps/{name}/kafka-credential")

    def grant(self, stream: str, app: str) -> StreamPublic:
        return self._read(_STREAM, "PUT", f"/v1/streams/{stream}/producers/{app}")

    def revoke(self, stream: str, app: str) -> StreamPublic:
        return self._read(_STREAM, "DELETE", f"/v1/streams/{stream}/producers/{app}")

    def create_owner(self, name: str) -> OwnerToken:
        return self._read(_OWNER_TOKEN, "POST", "/v1/owners", {"name": name})

    def owners(self) -> list[str]:
        return self._read(_OWNERS, "GET", "/v1/owners")

    def rotate_owner(self, name: str) -> OwnerToken:
        return self._read(_OWNER_TOKEN, "POST", f"/v1/owners/{name}/token")

    def delete_owner(self, name: str) -> None:
        self.call("DELETE", f"/v1/owners/{name}")

    def audit(self, limit: int = 100) -> list[AuditPublic]:
        return self._read(_AUDIT, "GET", "/v1/audit", limit=limit)

    def fronting(self) -> FrontingPublic:
        return self._read(_FRONTING, "GET", "/v1/fronting")

    def switch_fronting(self, to: str | None, stream: str | None = None) -> FrontingPublic:
        body = {"to": to, "stream": stream}
        return self._read(_FRONTING, "POST", "/v1/fronting/switch", body)
