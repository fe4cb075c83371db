"""What every request to control passes before its body is read, and how a body is read.

FastAPI reads and parses a route's body before it solves the route's dependencies, so a token
checked by a dependency is checked after the work a stranger asked for (24 MiB without a token
once took 1.6 s and 271 MiB before its 401). The gate runs first: it refuses a body over
`max_control_body_bytes` by its announced length, or once that many bytes have arrived, and it
authenticates an API request before anything of its body is read. Bodies are read as strict JSON:
UTF-8, no NaN or Infinity, no fraction or exponent beyond a double's range, so what control
validates is what it stores and what every reader reads back.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from keystone.contracts.errors import BadRequest, KeystoneError, PayloadTooLarge
from keystone.control.tenancy import Caller

API_PREFIX = "/v1/"
CALLER = "keystone.caller"  # the scope's key for the caller the gate authenticated


class Gate:
    """ASGI middleware: the body's size for every route, the token first for the API."""

    def __init__(
        self, app: ASGIApp, limit: int, authenticate: Callable[[Scope, str | None], Caller]
    ) -> None:
        self.app = app
        self.limit = limit
        self.authenticate = authenticate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        try:
            self._check_length(headers.get("content-length"))
            if scope["path"].startswith(API_PREFIX):
                caller = await run_in_threadpool(
                    self.authenticate, scope, headers.get("authorization")
                )
                scope[CALLER] = caller
            body = await self._read(receive)
        except KeystoneError as error:
            response = JSONResponse(error.body(), error.status, headers=error.headers())
            await response(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    def _check_length(self, declared: str | None) -> None:
        if declared is None:
            return
        if not declared.isdigit():
            raise BadRequest(f"Content-Length {declared!r} is not a number of bytes")
        if int(declared) > self.limit:
            raise self._too_large(f"the request's body is {declared} bytes")

    async def _read(self, receive: Receive) -> bytes:
        """The whole body, at most `limit` bytes of it (a body sent in chunks has no length
        to check in advance)."""
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                raise self._too_large(f"the request's body is over {self.limit} bytes")
            chunks.append(chunk)
            more = message.get("more_body", False)
        return b"".join(chunks)

    def _too_large(self, what: str) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"{what}; the limit is {self.limit} (max_control_body_bytes)",
            setting="max_control_body_bytes",
            limit=self.limit,
        )


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body already read, as the app's `receive` gives it; then whatever comes next (a
    disconnect) from the client."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _no_constant(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not JSON", name, 0)


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError as e:  # over Python's 4,300 digits
        raise json.JSONDecodeError(f"an integer of {len(text)} digits", text, 0) from e


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise json.JSONDecodeError(f"{text} is beyond a double", text, 0)
    return value


STRICT = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite, parse_int=_integer)


class StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                text = body.decode()
            except UnicodeDecodeError as e:
                raise json.JSONDecodeError("the body is not UTF-8", "", e.start) from e
            try:
                self._json = STRICT.decode(text)
            except RecursionError as e:
                raise json.JSONDecodeError("the body is nested too deeply", "", 0) from e
        return self._json


class StrictJSONRoute(APIRoute):
    """A route whose JSON body is read by `StrictJSONRequest` (422 for what it refuses)."""

    def get_route_handler(self) -> Callable:
        handle = super().get_route_handler()

        async def strict(request: Request) -> Any:
            return await handle(StrictJSONRequest(request.scope, request.receive))

        return strict
