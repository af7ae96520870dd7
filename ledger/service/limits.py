"""What one request may cost: its body size and its whole duration.

The old server gave each connection a thread and read bodies with a 60 s
idle timeout, so a client sending one byte every 2 s held a thread for as
long as it liked. Here a request is a coroutine (no thread while it waits),
uvicorn caps connections and idle keep-alives (`ledger.service.run`), and
this middleware bounds the rest: a declared body over the limit is refused
from its header alone, an undeclared (chunked) one as soon as it passes the
limit, and the whole request, body included, must finish within the deadline.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.requests import Request

from ledger.evidence.errors import Error

__all__ = [
    "DEADLINE_S",
    "MAX_BODY_BYTES",
    "SECURITY_HEADERS",
    "BodyTooLarge",
    "Limits",
    "read_body",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# The batch bound ledger.remote.client holds too: sixteen envelopes of the largest size (1 MiB).
MAX_BODY_BYTES = 16 * 1024 * 1024
DEADLINE_S = 60.0


SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    # Artifacts are bytes someone uploaded: never let a browser guess they are HTML.
    (b"x-content-type-options", b"nosniff"),
    # The pages use only their own stylesheet and inline SVG: nothing else loads,
    # no script runs, and no other site may frame them.
    (
        b"content-security-policy",
        b"default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; "
        b"form-action 'self'; frame-ancestors 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
)
"""Sent with every response of the application."""


class BodyTooLarge(Error):
    http_status = 413


def _too_large(n: int, limit: int) -> str:
    return f"request body is {n} bytes, over the {limit}-byte limit"


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused as soon as it passes `limit` (413)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(_too_large(int(declared), limit))
    chunks: list[bytes] = []
    n = 0
    async for chunk in request.stream():
        n += len(chunk)
        if n > limit:
            raise BodyTooLarge(f"request body is over the {limit}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


async def _answer(send: Send, status: int, reason: str, close: bool = True) -> None:
    body = json.dumps({"error": reason}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _with_security_headers(send: Send) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            have = {name.lower() for name, _ in message.get("headers", [])}
            extra = [(n, v) for n, v in SECURITY_HEADERS if n not in have]
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return wrapped


class Limits:
    """ASGI middleware: the declared body size (before anything is read) and the deadline."""

    def __init__(self, app: ASGIApp, max_body: int, deadline_s: float, upload_max: int) -> None:
        self.app = app
        self.max_body = max_body
        self.upload_max = upload_max
        self.deadline_s = deadline_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _with_security_headers(send)
        limit = self.upload_max if scope["path"].startswith("/v1/artifacts/") else self.max_body
        for name, value in scope["headers"]:
            if name == b"content-length":
                text = value.decode("latin-1")
                if not text.isdigit():
                    await _answer(send, 400, f"bad Content-Length {text!r}")
                    return
                if int(text) > limit:
                    # The body is left unread, so the connection is closed after the answer.
                    await _answer(send, 413, _too_large(int(text), limit))
                    return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            async with asyncio.timeout(self.deadline_s):
                await self.app(scope, receive, tracked)
        except TimeoutError:
            # A write already handed to the database finishes or rolls back as a
            # whole in its thread; the client may retry (a duplicate is harmless).
            if not started:
                await _answer(send, 408, f"request not completed within {self.deadline_s:g} s")
