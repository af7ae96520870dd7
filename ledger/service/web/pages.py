"""The pages: an index, a PR (or revision) page, a claim's trend on a PR, a
receipt page and a memory plot of a snapshot artifact. Each state carries
`data-state` (and each matrix cell `data-claim`/`data-scope`) so tests compare
a page with `status --json`.

A page asked for with `Accept: application/json` (and not text/html) answers
the JSON document it renders; an error answers a page with a heading, the
reason and a way back to a browser, JSON to an API client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from ledger.evidence.errors import Error
from ledger.read import humanize
from ledger.read.inert import inert
from ledger.service.web import charts, views

__all__ = ["ROUTES", "STATIC", "error_page", "wants_html"]

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
_env.filters["envline"] = lambda env: humanize.environment_line(dict(env or {}))
# A signed name (a host, a GPU) shown with its control characters visible, never sent
# (a receipt logged before ingest checked names may still carry one).
_env.filters["inert"] = lambda s: inert(str(s))


def _commands(text: str | None) -> Markup:
    """`ledger ...` spans of a sentence as code, the rest escaped."""
    parts = str(text or "").split("`")
    return Markup("").join(
        Markup("<code>{}</code>").format(p) if i % 2 else escape(p) for i, p in enumerate(parts)
    )


_env.filters["commands"] = _commands


def _figures(text: str | None, limit: int | None = None) -> Markup:
    """A recorded sentence with its byte counts and long floats readable, the
    exact figure on hover (`title`); cut after `limit` characters shown."""
    out: list[Markup] = []
    used = 0
    for shown, exact in humanize.figure_spans(str(text or "")):
        if limit is not None and used + len(shown) > limit:
            out.append(escape(shown[: max(limit - used, 0)]) + Markup("…"))
            break
        used += len(shown)
        if exact is None:
            out.append(escape(shown))
        else:
            out.append(Markup('<span class="fig" title="{}">{}</span>').format(exact, shown))
    return Markup("").join(out)


_env.filters["figures"] = _figures
_env.filters["breakdown"] = lambda v: humanize.state_breakdown(v)

_HEADINGS = {400: "Bad request", 404: "Not found", 405: "Not allowed", 409: "Conflict"}


def wants_html(request: Request) -> bool:
    """A browser (it asks for text/html); API clients get JSON."""
    return "text/html" in request.headers.get("accept", "")


def _wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def error_page(status: int, reason: str, back: str | None = None) -> Response:
    """An error for a person: a heading, the reason, a way back."""
    heading = _HEADINGS.get(status, "Something went wrong" if status >= 500 else "Cannot show this")
    return _render("error.html", status, heading=heading, reason=reason, back=back)


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


def _page(
    fn: Callable[[Any, Request], dict[str, Any]], template: str, as_json: str | None = None
) -> Page:
    """A page; `as_json` names the part of its context an API client gets."""

    async def handle(request: Request) -> Response:
        led = request.app.state.ledger
        json_client = _wants_json(request)
        try:
            ctx = await run_in_threadpool(fn, led, request)
        except Error as e:
            from ledger.service.api import public_reason

            reason = public_reason(led, e.reason())
            if json_client:
                return JSONResponse({"error": reason}, min(e.http_status, 500))
            return error_page(min(e.http_status, 500), reason)
        if json_client and as_json is not None:
            return JSONResponse(ctx[as_json])
        return _render(template, **ctx)

    handle.__name__ = fn.__name__
    return handle


def fresh(led: Any) -> list[str]:
    """The server's checkouts fetched where due; what failed, as notes."""
    from ledger.service.responses import fresh as fetched

    return fetched(led)


def _index(led: Any, request: Request) -> dict[str, Any]:
    from ledger.service.api import public_reason

    fresh(led)  # the checkouts fetched once for every PR the index judges
    # Each verdict the status answer the JSON routes keep (`Ledger.answers`).
    repos = views.index(led.reader(), led.mirrors, led.answers)
    # Each PR's or revision's error is shown to any client: without the server's
    # paths, as every other public error is.
    for r in repos:
        for row in (*r["prs"], *r["revisions"]):
            if row.get("error"):
                row["error"] = public_reason(led, row["error"])
    return {"repos": repos}


def _pr(led: Any, request: Request) -> dict[str, Any]:
    q = request.query_params
    # The checkout fetched first (bounded), so a force-pushed head is judged; a fetch
    # that failed is a note of the page, never its error.
    notes = fresh(led)
    ctx = views.pr_page(
        led.reader(),
        q.get("repo", ""),
        q.get("pr"),
        q.get("rev"),
        led.mirrors,
        q.getlist("scope"),
        led.answers,
    )
    ctx["report"]["judged"] = [*ctx["report"].get("judged", []), *notes]
    return ctx


def _trend(led: Any, request: Request) -> dict[str, Any]:
    """A claim's trend on a PR (`ledger trend`), public as the PR page is."""
    q = request.query_params
    fresh(led)
    return views.trend_page(
        led.reader(),
        q.get("repo", ""),
        q.get("pr"),
        q.get("claim", ""),
        led.mirrors,
        q.get("figure"),
    )


def _receipt(led: Any, request: Request) -> dict[str, Any]:
    return views.receipt_page(led.reader(), str(request.path_params["ref"]), led)


def _memory(led: Any, request: Request) -> dict[str, Any]:
    return views.memory_page(led, str(request.path_params["digest"]))


def _fleet(led: Any, request: Request) -> dict[str, Any]:
    """`ledger fleet` of the server's ledger, for a token with the read role (as the
    JSON route `/v1/fleet`)."""
    from ledger.service.api import quarantine_rate

    led.holder(request, "read")
    above = quarantine_rate(request.query_params.get("quarantine_above"))
    return {"doc": led.reader().fleet(above), "above": above}


async def _anchor(request: Request) -> Response:
    """The ledger's public key (PEM): the trust anchor `ledger verify --trust` takes."""
    from ledger.evidence.keys import active_ledger_key, public_pem

    led = request.app.state.ledger
    try:
        info = await run_in_threadpool(lambda: active_ledger_key(led.store().keys()))
    except Error as e:
        return (
            error_page(404, e.reason())
            if wants_html(request)
            else Response(e.reason(), 404, media_type="text/plain")
        )
    return Response(
        public_pem(info.public),
        media_type="application/x-pem-file",
        headers={"Content-Disposition": 'attachment; filename="ledger.pub.pem"'},
    )


ROUTES: list[tuple[str, Page]] = [
    ("/", _page(_index, "index.html", "repos")),
    ("/pr", _page(_pr, "pr.html", "report")),
    ("/trend", _page(_trend, "trend.html", "trend")),
    ("/receipt/{ref}", _page(_receipt, "receipt.html", "doc")),
    ("/artifact/{digest}/memory", _page(_memory, "memory.html")),
    ("/fleet", _page(_fleet, "fleet.html", "doc")),
    ("/ledger.pub.pem", _anchor),
]
