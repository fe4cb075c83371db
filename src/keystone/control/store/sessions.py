"""Web sessions: a random id in the browser's cookie, the token's hash here, for a while."""

from __future__ import annotations

import secrets

from keystone.contracts.registry import hash_key, key
from keystone.control.store.base import Repository


class Sessions(Repository):
    def open(self, token_sha256: str, seconds: int) -> str:
        """A new session for the holder of the token; its id, stored only hashed."""
        session = secrets.token_urlsafe(32)
        self._call(self.redis.set, key("session", hash_key(session)), token_sha256, ex=seconds)
        return session

    def token(self, session: str) -> str | None:
        """The hash of the token the session was opened with, while the session lasts."""
        digest = self._call(self.redis.get, key("session", hash_key(session)))
        return digest.decode() if digest is not None else None

    def close(self, session: str) -> None:
        self._call(self.redis.delete, key("session", hash_key(session)))
