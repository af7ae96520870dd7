"""Run the service under uvicorn, with the connection cap and timeouts that
bound what slow or idle clients can hold (the body and deadline limits are
`ledger.service.limits`)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from ledger.evidence.errors import UsageError
from ledger.evidence.keys import KeyDir
from ledger.service.auth import Tokens
from ledger.service.fetching import FETCH_EVERY_S
from ledger.service.guard import HEADER_TIMEOUT_S, MAX_PER_CLIENT
from ledger.service.limits import DEADLINE_S
from ledger.store.store import Store
from ledger.write.artifacts import for_ledger

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "MAX_CONNECTIONS", "Running", "serve", "start"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
MAX_CONNECTIONS = 256
"""Open connections and requests in flight beyond this are answered 503 at once."""
KEEP_ALIVE_S = 5
"""An idle keep-alive connection is closed after this."""


@dataclass
class Running:
    """A server started in a thread (tests, benchmarks)."""

    url: str
    server: Any
    thread: threading.Thread
    store: Store

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.store.dispose()


def _config(
    app: Any,
    host: str,
    port: int,
    quiet: bool,
    header_timeout_s: float = HEADER_TIMEOUT_S,
    max_per_client: int = MAX_PER_CLIENT,
) -> Any:
    import uvicorn

    from ledger.service.guard import guarded_protocol

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        # Per client: a connection cap and a deadline for headers (ledger.service.guard).
        http=guarded_protocol(header_timeout_s, max_per_client, _known_token(app)),
        limit_concurrency=MAX_CONNECTIONS,
        timeout_keep_alive=KEEP_ALIVE_S,
        # Requests in flight get this long to finish on Ctrl-C before they are cut.
        timeout_graceful_shutdown=30,
        h11_max_incomplete_event_size=64 * 1024,
        access_log=not quiet,
        log_level="warning" if quiet else "info",
        lifespan="off",
    )


def _known_token(app: Any) -> Any:
    """Whether a bearer token is one of the server's (the guard counts its holder's
    connections by it); None where the app holds no token table."""
    ledger = getattr(getattr(getattr(app, "app", None), "state", None), "ledger", None)
    tokens = getattr(ledger, "tokens", None)
    if tokens is None:
        return None

    def known(token: str) -> bool:
        try:
            tokens.grant(f"Bearer {token}")
        except Exception:  # any refusal: not a token of this server
            return False
        return True

    return known


def _app(
    store_url: str,
    keys: KeyDir | None,
    tokens: Path | None,
    artifacts: str | None,
    deadline_s: float,
    quiet: bool,
    mirrors: Sequence[Path] = (),
    fetch_every: float = FETCH_EVERY_S,
) -> tuple[Any, Store]:
    from ledger.service.app import create_app

    store = Store.open(store_url)
    app = create_app(
        store,
        keys,
        tokens=Tokens.load(tokens),
        artifacts=for_ledger(store_url, artifacts),
        deadline_s=deadline_s,
        quiet=quiet,
        mirrors=mirrors,
        fetch_every=fetch_every,
    )
    return app, store


def start(
    store_url: str,
    keys: KeyDir | None = None,
    *,
    tokens: Path | None = None,
    artifacts: str | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    deadline_s: float = DEADLINE_S,
    quiet: bool = True,
    mirrors: Sequence[Path] = (),
    header_timeout_s: float = HEADER_TIMEOUT_S,
    max_per_client: int = MAX_PER_CLIENT,
    fetch_every: float = FETCH_EVERY_S,
) -> Running:
    """Serve in a background thread on `port` (0: a free one); returns once it listens."""
    import uvicorn

    app, store = _app(store_url, keys, tokens, artifacts, deadline_s, quiet, mirrors, fetch_every)
    # uvicorn binds the port itself: it sets the accepted sockets' options
    # (TCP_NODELAY), without which every keep-alive reply waited ~40 ms.
    server = uvicorn.Server(_config(app, host, port, quiet, header_timeout_s, max_per_client))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        thread.join(0.02)
    if not server.started:
        raise UsageError(f"ledger serve did not start on {host}:{port}")
    bound = server.servers[0].sockets[0].getsockname()[1]
    return Running(f"http://{host}:{bound}", server, thread, store)


def serve(
    store_url: str,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    keys: KeyDir | None = None,
    *,
    tokens: Path | None = None,
    artifacts: str | None = None,
    deadline_s: float = DEADLINE_S,
    mirrors: Sequence[Path] = (),
    fetch_every: float = FETCH_EVERY_S,
) -> None:
    """Serve until Ctrl-C; requests in flight are finished before it returns."""
    import uvicorn

    app, store = _app(store_url, keys, tokens, artifacts, deadline_s, False, mirrors, fetch_every)
    safe = make_url(store_url).render_as_string(hide_password=True)
    signing = (
        "signs fresh checkpoints" if app.app.state.ledger.keys else "serves stored checkpoints"
    )
    sys.stderr.write(f"ledger serve: {safe} on http://{host}:{port} ({signing}); Ctrl-C stops\n")
    try:
        uvicorn.Server(_config(app, host, port, quiet=False)).run()
    finally:
        store.dispose()
