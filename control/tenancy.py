"""Who is calling, and what they may touch.

Two kinds of principal: the admin (one token, from settings or generated once into the state
directory) and owners, each with a token of their own, who see and change only the streams and
apps they own. Tokens are compared by their SHA-256; owners' tokens are stored only hashed.
"""

from __future__ import annotations

import hmac
import os
import secrets
from dataclasses import dataclass

from contracts.errors import Forbidden, NotFound, Unauthorized
from contracts.settings import Settings
from contracts.spec import StreamSpec
from control.store import App, Store, hash_key

ADMIN = "admin"


@dataclass(frozen=True)
class Caller:
    name: str  # "admin" or an owner's name
    admin: bool

    def owns(self, owner: str) -> bool:
        return self.admin or owner == self.name

    def require_admin(self) -> None:
        if not self.admin:
            raise Forbidden("only the admin may do this")

    def visible_stream(self, spec: StreamSpec) -> StreamSpec:
        """The stream if the caller owns it; another owner's stream does not exist for them."""
        if not self.owns(spec.owner):
            raise NotFound(f"no stream {spec.name!r}")
        return spec

    def visible_app(self, app: App) -> App:
        if not self.owns(app.owner):
            raise NotFound(f"no app {app.name!r}")
        return app


def admin_token(settings: Settings, create: bool = False) -> str | None:
    """The admin token: from settings, else the state directory's (made there when `create`,
    readable by its owner only). None when there is none to read."""
    configured = settings.admin_token.get_secret_value()
    if configured:
        return configured
    path = settings.admin_token_file
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        if not create:
            return None
    except PermissionError:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    token = f"ka_{secrets.token_urlsafe(32)}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token)
    return token


class Authenticator:
    def __init__(self, settings: Settings, store: Store) -> None:
        token = admin_token(settings, create=True)
        assert token is not None
        self._admin_digest = hash_key(token)
        self._store = store

    def caller(self, authorization: str | None) -> Caller:
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("a token is required: Authorization: Bearer <token>")
        if hmac.compare_digest(hash_key(token), self._admin_digest):
            return Caller(ADMIN, admin=True)
        owner = self._store.owner_by_token(token)
        if owner is None:
            raise Unauthorized("the token is not valid")
        return Caller(owner, admin=False)
