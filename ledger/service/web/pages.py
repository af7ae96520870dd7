"""The pages: an index, a PR (or revision) page, a receipt page and a memory
plot of a snapshot artifact. Each state carries `data-state` (and each matrix
cell `data-claim`/`data-scope`) so tests compare a page with `status --json`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from ledger.errors import Error
from ledger.service.web import charts, views

__all__ = ["ROUTES", "STATIC"]

HERE = Path(__file__).parent
STATIC = HERE / "static"
_env = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters["bytes"] = charts.human_bytes
_env.filters["short"] = lambda s: str(s).removeprefix("sha256:")[:12]
_env.filters["q"] = lambda d: urlencode(d)
_env.filters["path"] = lambda s: quote(str(s), safe=":")


def _render(name: str, status: int = 200, **ctx: Any) -> Response:
    # Pages never change what they show once logged, but a new receipt changes
    # an index or PR page: no caching, and nothing a browser must fetch elsewhere.
    html = _env.get_template(name).render(**ctx)
    return HTMLResponse(
        html,
        status,
        # The CSP and nosniff are every response's (ledger.service.limits).
        headers={"Cache-Control": "no-store"},
    )


Page = Callable[[Request], Awaitable[Response]]


def _page(fn: Callable[[Any, Request], dict[str, Any]], template: str) -> Page:
    async def handle(request: Request) -> Response:
        led = request.app.state.ledger
        try:
            ctx = await run_in_threadpool(fn, led, request)
        except Error as e:
            return _render("error.html", min(e.http_status, 500), reason=e.reason())
        return _render(template, **ctx)

    handle.__name__ = fn.__name__
    return handle


def _index(led: Any, request: Request) -> dict[str, Any]:
    return {"repos": views.index(led.store())}


def _pr(led: Any, request: Request) -> dict[str, Any]:
    q = request.query_params
    return views.pr_page(led.store(), q.get("repo", ""), q.get("pr"), q.get("rev"), led.mirrors)


def _receipt(led: Any, request: Request) -> dict[str, Any]:
    return views.receipt_page(led.store(), str(request.path_params["ref"]), led)


def _memory(led: Any, request: Request) -> dict[str, Any]:
    return views.memory_page(led, str(request.path_params["digest"]))


ROUTES: list[tuple[str, Page]] = [
    ("/", _page(_index, "index.html")),
    ("/pr", _page(_pr, "pr.html")),
    ("/receipt/{ref}", _page(_receipt, "receipt.html")),
    ("/artifact/{digest}/memory", _page(_memory, "memory.html")),
]
