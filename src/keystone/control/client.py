"""A client of the control API, for the `keystone` command, tools and tests. Errors come back as
the KeystoneError the service raised: same status, message and details."""

from __future__ import annotations

from typing import Any

import httpx

from keystone.contracts.errors import KeystoneError, Unauthorized, Unavailable
from keystone.contracts.settings import Settings
from keystone.control.tenancy import admin_token


class ControlError(KeystoneError):
    """An error the control service answered with."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        details = {k: v for k, v in body.items() if k not in ("error", "message")}
        super().__init__(body.get("message") or f"control answered {status}", **details)
        self.status = status  # type: ignore[misc]  # the instance's, not the class's
        self.kind = body.get("error", "")


class ControlClient:
    def __init__(self, url: str, token: str, timeout: float = 60) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self._http = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout
        )

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
        return cls(settings.control_url, token)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def call(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        try:
            answer = self._http.request(method, path, json=body, params=params or None)
        except httpx.TransportError as e:
            raise Unavailable(
                f"control at {self.url} is unreachable ({e}): is the stack up? (keystone stack up)",
                retry_after=2,
            ) from e
        if answer.status_code == 204:
            return None
        try:
            data = answer.json()
        except ValueError:
            data = {"message": answer.text[:500]}
        if answer.status_code >= 400:
            raise ControlError(answer.status_code, data if isinstance(data, dict) else {})
        return data

    # Streams and outputs

    def streams(self) -> list[dict]:
        return self.call("GET", "/v1/streams")

    def stream(self, name: str) -> dict:
        return self.call("GET", f"/v1/streams/{name}")

    def create_stream(self, spec: dict) -> dict:
        return self.call("POST", "/v1/streams", spec)

    def put_stream(self, spec: dict) -> dict:
        return self.call("PUT", f"/v1/streams/{spec['name']}", spec)

    def delete_stream(self, name: str) -> None:
        self.call("DELETE", f"/v1/streams/{name}")

    def status(self, name: str) -> dict:
        return self.call("GET", f"/v1/streams/{name}/status")

    def put_output(self, stream: str, output: dict) -> dict:
        return self.call("PUT", f"/v1/streams/{stream}/outputs/{output['name']}", output)

    def delete_output(self, stream: str, output: str) -> dict:
        return self.call("DELETE", f"/v1/streams/{stream}/outputs/{output}")

    def preview(self, stream: str, output: str, **draft: Any) -> dict:
        return self.call("POST", f"/v1/streams/{stream}/outputs/{output}/preview", draft)

    # Apps and owners

    def create_app(self, name: str, rate: int | None = None) -> dict:
        """`rate` None: control's default quota for the caller (`AppCreate`)."""
        return self.call("POST", "/v1/apps", {"name": name, "rate": rate})

    def apps(self) -> list[dict]:
        return self.call("GET", "/v1/apps")

    def rotate_app(self, name: str) -> dict:
        return self.call("POST", f"/v1/apps/{name}/key")

    def delete_app(self, name: str) -> None:
        self.call("DELETE", f"/v1/apps/{name}")

    def grant(self, stream: str, app: str) -> dict:
        return self.call("PUT", f"/v1/streams/{stream}/producers/{app}")

    def revoke(self, stream: str, app: str) -> dict:
        return self.call("DELETE", f"/v1/streams/{stream}/producers/{app}")

    def create_owner(self, name: str) -> dict:
        return self.call("POST", "/v1/owners", {"name": name})

    def owners(self) -> list[str]:
        return self.call("GET", "/v1/owners")

    def rotate_owner(self, name: str) -> dict:
        return self.call("POST", f"/v1/owners/{name}/token")

    def delete_owner(self, name: str) -> None:
        self.call("DELETE", f"/v1/owners/{name}")

    def audit(self, limit: int = 100) -> list[dict]:
        return self.call("GET", "/v1/audit", limit=limit)
