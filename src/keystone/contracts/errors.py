"""The error hierarchy: every failure the project raises on purpose is a KeystoneError.

Each error knows the HTTP status it means, so every HTTP service maps errors to responses in
one place (its exception handler), and the CLI turns them into one line and exit code 1.
"""

from __future__ import annotations

from typing import Any, ClassVar


class KeystoneError(Exception):
    """Base of every deliberate error; its message is meant for the user."""

    status: ClassVar[int] = 500

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details  # extra fields of the JSON error body

    def body(self) -> dict[str, Any]:
        return {"error": type(self).__name__, "message": self.message, **self.details}

    def headers(self) -> dict[str, str]:
        return {}


class StackError(KeystoneError):
    """The embedded stack could not do what was asked (a port taken, a download failed...)."""


class SinkError(KeystoneError):
    """A sink cannot be prepared or written as its output asks: the service behind it is away
    or refuses (the router logs and retries; control answers 503)."""

    status = 503


class BadRequest(KeystoneError):
    status = 400


class InvalidName(BadRequest, ValueError):
    """A stream, output or app name that could not become a topic, table or index name.
    Also a ValueError, so model validators report it as a field error."""


class InvalidSpec(KeystoneError):
    """A stream spec that fails validation; `details` say which field and why."""

    status = 422


class ExpressionError(KeystoneError):
    """A filter or projection that does not parse: where, and what was expected there."""

    status = 422

    def __init__(
        self, problem: str, expression: str, column: int, expected: str, **details: Any
    ) -> None:
        """`details`: more fields of the error body, say the `setting` and `limit` a filter
        is over."""
        pointer = " " * (column - 1) + "^"
        super().__init__(
            f"{problem} (column {column})\n  {expression}\n  {pointer}",
            expression=expression,
            column=column,
            expected=expected,
            **details,
        )


class Unauthorized(KeystoneError):
    status = 401

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": "Bearer"}


class Forbidden(KeystoneError):
    status = 403


class NotFound(KeystoneError):
    status = 404


class Conflict(KeystoneError):
    status = 409


class Unprocessable(KeystoneError):
    """A well-formed request for what cannot be done as asked (a rewind to a time in the
    future, or before what the topic keeps); `details` say what can."""

    status = 422


class Gone(KeystoneError):
    """What was asked for existed once and no longer does (a restore point thinned away)."""

    status = 410


class LimitExceeded(KeystoneError):
    """A request over one of the service's limits (`contracts.limits`): the body names the
    setting that holds the limit, the limit, and the field or part of the request over it."""

    status = 422

    def __init__(
        self, message: str, *, setting: str, limit: int, field: str = "", **details: Any
    ) -> None:
        super().__init__(message, setting=setting, limit=limit, **details)
        if field:
            self.details["field"] = field


class PayloadTooLarge(LimitExceeded):
    status = 413


class UnsupportedMediaType(KeystoneError):
    status = 415


class SchemaMismatch(KeystoneError):
    """Events that do not match their stream's Avro schema."""

    status = 422


class Backpressure(KeystoneError):
    """Try again later: `retry_after` seconds is a hint the client should honour."""

    def __init__(self, message: str, retry_after: float, **details: Any) -> None:
        super().__init__(message, retry_after=retry_after, **details)
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(max(1, round(self.retry_after)))}


class RateLimited(Backpressure):
    status = 429


class Unavailable(Backpressure):
    """A dependency (Kafka, Redis) is unreachable or full; nothing of the request is lost."""

    status = 503
