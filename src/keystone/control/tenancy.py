"""Who is calling, and what they may touch.

Two kinds of principal: the admin (one token, from settings or generated once into the state
directory) and owners, each with a token of their own, who see and change only the streams and
apps they own. Tokens are compared by their SHA-256; owners' tokens are stored only hashed.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from keystone.contracts.errors import Forbidden, NotFound, Unauthorized
from keystone.contracts.registry import App, hash_key
from keystone.contracts.settings import Settings, stored_secret
from keystone.contracts.spec import StreamSpec
from keystone.control.store import Store

ADMIN = "admin"
SESSION_SECONDS = 12 * 3600  # a web session's life, kept by the server, not the browser


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
    return configured or stored_secret(settings.admin_token_file, create, prefix="ka_")


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
        return self.by_digest(hash_key(token))

    def by_digest(self, token_sha256: str) -> Caller:
        """Whose token has this hash (a web session keeps only the hash); 401 for nobody's,
        as for a rotated or removed token."""
        if hmac.compare_digest(token_sha256, self._admin_digest):
            return Caller(ADMIN, admin=True)
        owner = self._store.principals.owner_by_digest(token_sha256)
        if owner is None:
            raise Unauthorized("the token is not valid")
        return Caller(owner, admin=False)

    def sign_in(self, token: str) -> str:
        """A web session for a valid token (401 otherwise): its id, for the cookie. It ends
        after SESSION_SECONDS, at sign-out, or when the token is rotated or removed."""
        self.caller(f"Bearer {token}")
        return self._store.sessions.open(hash_key(token), SESSION_SECONDS)

    def session(self, session: str) -> Caller:
        digest = self._store.sessions.token(session)
        if digest is None:
            raise Unauthorized("the session has ended: sign in again")
        return self.by_digest(digest)

    def sign_out(self, session: str) -> None:
        self._store.sessions.close(session)
