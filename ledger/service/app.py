"""Assembly: the ledger a server holds, and the Starlette application over it."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from ledger.evidence.errors import Error
from ledger.evidence.keys import KeyDir, active_ledger_key
from ledger.service import api
from ledger.service.auth import Tokens
from ledger.service.fetching import FETCH_EVERY_S, MirrorFetch
from ledger.service.limits import DEADLINE_S, MAX_BODY_BYTES, Limits
from ledger.service.state import Ledger
from ledger.store.store import Store
from ledger.write.artifacts import ArtifactStore, for_ledger

__all__ = ["Ledger", "create_app"]


def _signing_keys(store: Store, keys: KeyDir | None) -> KeyDir | None:
    """The key dir only when it holds this ledger's private key: then bundles of
    entries no checkpoint covers yet get a fresh checkpoint; otherwise they are
    404 until someone runs `ledger log checkpoint`."""
    if keys is None:
        return None
    try:
        info = active_ledger_key(store.keys())
        if not keys.file(info.name).exists():
            return None
        local = keys.load(info.name)
    except Error as e:
        sys.stderr.write(f"ledger serve: not signing checkpoints: {e.reason()}\n")
        return None
    if local.keyid != info.keyid:
        sys.stderr.write(
            f"ledger serve: not signing checkpoints: private key {info.name!r}"
            f" is not the ledger key {info.keyid[:12]}\n"
        )
        return None
    return keys


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    from ledger.service.web import pages

    reasons = {404: f"no such resource {request.url.path}", 405: f"cannot {request.method} here"}
    reason = reasons.get(exc.status_code, str(exc.detail))
    if pages.wants_html(request) and not request.url.path.startswith("/v1/"):
        return pages.error_page(exc.status_code, reason)
    return api.error_response(exc.status_code, reason)


async def _internal(request: Request, exc: Exception) -> Response:
    return api.error_response(500, "internal server error")


def create_app(
    store: Store,
    keys: KeyDir | None = None,
    *,
    tokens: Tokens | None = None,
    artifacts: ArtifactStore | None = None,
    max_body: int = MAX_BODY_BYTES,
    deadline_s: float = DEADLINE_S,
    quiet: bool = False,
    mirrors: Sequence[Path] = (),
    fetch_every: float = FETCH_EVERY_S,
) -> Any:
    """The ASGI application (Starlette wrapped in the request limits)."""
    from ledger.service.web import pages
    from ledger.write.artifacts import MAX_ARTIFACT_BYTES

    store.live = True
    ledger = Ledger(
        store,
        _signing_keys(store, keys),
        tokens or Tokens({}),
        artifacts or for_ledger(store.url),
        max_body,
        quiet,
        tuple(mirrors),
        fetch=MirrorFetch(fetch_every),
    )
    routes: list[BaseRoute] = [Route(p, h, methods=m) for p, h, m in api.ROUTES]
    routes += [Route(p, h, methods=["GET"]) for p, h in pages.ROUTES]
    routes.append(Mount("/static", app=StaticFiles(directory=pages.STATIC), name="static"))
    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: _http_error, Exception: _internal},
    )
    app.state.ledger = ledger
    return Limits(app, max_body, deadline_s, MAX_ARTIFACT_BYTES)
