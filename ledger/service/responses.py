"""What every JSON route shares: its responses (`{"error": "<one line>"}` for an error,
never naming where the server keeps things), the one error boundary (`guarded`) and the
bounded parsing of a request's body."""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ledger.evidence.errors import Error, InputError, RefusedError
from ledger.evidence.limits import load_json
from ledger.service.limits import read_body

if TYPE_CHECKING:
    from ledger.service.state import Ledger

__all__ = [
    "Handler",
    "error_response",
    "fresh",
    "guarded",
    "json_body",
    "json_response",
    "kept_response",
    "ledger_of",
    "object_body",
    "public_reason",
    "string_field",
]


class _JSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        return _encode(content)


def json_response(doc: Any, status: int = 200) -> Response:
    return _JSON(doc, status, headers={"Cache-Control": "no-store"})


def _encode(doc: Any) -> bytes:
    return json.dumps(doc, indent=2).encode() + b"\n"


def kept_response(led: Ledger, doc: Any) -> Response:
    """An answer the server keeps (`Ledger.answers`): its JSON encoded once."""
    body = led.answers.encoded(doc, _encode)
    return Response(body, 200, headers={"Cache-Control": "no-store"}, media_type="application/json")


def error_response(status: int, reason: str) -> Response:
    return json_response({"error": " ".join(reason.split()) or "error"}, status)


def fresh(led: Ledger) -> list[str]:
    """Fetch the server's checkouts that are due (`ledger.service.fetching`); what
    failed, as notes any client may read (without the server's own paths)."""
    if not led.mirrors:
        return []
    return [public_reason(led, n) for n in led.fetch.refresh(led.mirrors)]


def public_reason(led: Ledger, reason: str) -> str:
    """`reason` without the server's own paths (its database, artifact store, mirrors,
    keys): a client learns what failed, never where the server keeps things."""
    paths = {led.artifacts.location, led.base.url, *(str(m) for m in led.mirrors)}
    if led.keys is not None:
        paths.add(str(led.keys.path))
    for p in list(paths):
        if "://" in p:
            paths.add(p.split("://", 1)[1].lstrip("/"))
            paths.add("/" + p.split("://", 1)[1].lstrip("/"))
        elif p:
            # A relative folder is also named resolved (an OS error names it so).
            paths.add(os.path.abspath(p))
    return _redact(reason, tuple(sorted(p.rstrip("/") for p in paths if len(p) > 1)))


@functools.lru_cache(maxsize=64)
def _server_paths(paths: tuple[str, ...]) -> re.Pattern[str]:
    """Whole paths only: not a repository id or a word that merely contains one
    (`example.org/srv/m-fork`, `artifact` beside a folder `art`), and with any path
    beneath, so no part of where the server keeps things is named."""
    alts = "|".join(re.escape(p) for p in sorted(paths, key=len, reverse=True))
    return re.compile(rf"(?<![\w.~/-])(?:{alts})(?:/[^\s'\"`),;]*)?(?![\w.~-])")


def _redact(reason: str, paths: tuple[str, ...]) -> str:
    return _server_paths(paths).sub("the server's storage", reason) if paths else reason


def ledger_of(request: Request) -> Ledger:
    led: Ledger = request.app.state.ledger
    return led


Handler = Callable[[Request], Awaitable[Response]]


def guarded(fn: Handler) -> Handler:
    """The one error boundary of the JSON routes."""

    async def run(request: Request) -> Response:
        try:
            return await fn(request)
        except Error as e:
            if e.http_status < 500:
                return error_response(e.http_status, public_reason(ledger_of(request), e.reason()))
            sys.stderr.write(f"ledger serve: {request.method} {request.url.path}: {e.reason()}\n")
            return error_response(500, "the ledger server could not complete the request")
        except Exception as e:
            from sqlalchemy.exc import SQLAlchemyError

            if isinstance(e, SQLAlchemyError):
                first = (str(getattr(e, "orig", None) or e).strip().splitlines() or ["?"])[0]
                sys.stderr.write(f"ledger serve: {request.method} {request.url.path}: {first}\n")
                return error_response(500, "the ledger server could not complete the request")
            # Details go to the operator's log, never to the client.
            traceback.print_exc(file=sys.stderr)
            return error_response(500, "internal server error")

    run.__name__ = fn.__name__
    return run


def json_body(data: bytes) -> Any:
    # Depth- and integer-bounded (ledger.evidence.limits): a body nested 100,000 deep is a
    # 400, not a 500.
    try:
        return load_json(data, "")
    except InputError as e:
        raise RefusedError(e.reason()) from None


async def object_body(request: Request) -> dict[str, Any]:
    doc = json_body(await read_body(request, ledger_of(request).max_body))
    if not isinstance(doc, dict):
        raise RefusedError("expected a JSON object")
    return doc


def string_field(doc: dict[str, Any], key: str, *, optional: bool = False) -> str:
    value = doc.get(key)
    if value is None and optional:
        return ""
    if not isinstance(value, str) or not value.strip():
        raise RefusedError(f"{key}: expected a non-empty string")
    return value
