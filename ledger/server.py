"""`ledger serve`: one team ledger over HTTP, written to by many GPU hosts.

Runners post signed DSSE envelopes; the server verifies and records them
through `ledger.ingest.record`, the same all-or-nothing path as `ledger
record`. Writers therefore need a registered signing key, not database
credentials: the signature, not the connection, is the authority. Reads
(entries, bundles, the newest checkpoint) are public to whoever can reach the
port, so the default bind is 127.0.0.1.

    POST /v1/envelopes         JSON envelope or array of them -> 201/200
                               [{"id", "kind", "seq", "duplicate"}]
    GET  /v1/entries/<ref>     the `ledger show --json` document
    GET  /v1/bundles/<ref>     the export bundle (`ledger verify FILE`)
    GET  /v1/checkpoint        the newest signed checkpoint note (text/plain)
    GET  /v1/log/proof/<ref>   inclusion proof (the `ledger log proof --json` document)
    GET  /v1/log/consistency?from=OLD[&to=NEW]
                               consistency proof to a checkpoint (default the newest):
                               {"old", "new", "proof", "checkpoint"}
    GET  /healthz              {"ok": true, "entries": N}

Every error is `{"error": "<one line>"}`: 400 refused or malformed input,
404 unknown id, 411 no Content-Length, 413 a body over MAX_BODY_BYTES, 500
anything else (details go to the server's stderr, never to the client).
"""

from __future__ import annotations

import json
import sys
import time
import traceback
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from ledger.dsse import MAX_ENVELOPE_BYTES
from ledger.errors import Error, InputError, UsageError
from ledger.ingest import record
from ledger.keys import KeyDir, active_ledger_key
from ledger.limits import MAX_INT, load_json
from ledger.log import export, inclusion
from ledger.log.witness import prove
from ledger.query import show_document
from ledger.store.store import Store

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "MAX_BODY_BYTES", "LedgerServer", "make_server", "serve"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
# 16 envelopes of the largest size one may have (16 MiB); ledger.client holds
# the same number so it can refuse an oversized batch before sending it.
MAX_BODY_BYTES = 16 * MAX_ENVELOPE_BYTES


class RequestError(Exception):
    """Answer the request with this status and one-line reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class LedgerServer(ThreadingHTTPServer):
    """Holds the one engine all request threads share (SQLAlchemy pools are thread-safe)."""

    # Non-daemon request threads, joined on close: Ctrl-C lets an append in
    # flight commit or roll back rather than die mid-transaction.
    daemon_threads = False
    block_on_close = True

    def __init__(self, addr: tuple[str, int], store: Store, keys: KeyDir | None) -> None:
        self.store = store
        self.keys = keys
        super().__init__(addr, Handler)

    def request_store(self) -> Store:
        # A fresh Store per request over the shared engine: Store caches the key
        # table, and a long-running server must see keys registered or revoked
        # by other writers since it started.
        return Store(self.store.engine, self.store.url)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host = str(host)
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"


class Handler(BaseHTTPRequestHandler):
    server_version = "ledger"
    # Bounds how long a silent or slow client can hold a request thread.
    timeout = 60

    _status = 0

    @property
    def ledger(self) -> LedgerServer:
        return cast(LedgerServer, self.server)

    # -- plumbing ----------------------------------------------------------------

    def _reply(
        self, status: int, body: bytes, content_type: str = "application/json", close: bool = False
    ) -> None:
        self._status = status
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, doc: Any) -> None:
        self._reply(status, json.dumps(doc, indent=2).encode() + b"\n")

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # http.server's own refusals (bad request line, unsupported method) in
        # the same JSON shape as ours instead of its HTML page.
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "error"
        self._json(code, {"error": " ".join((message or phrase).split())})
        self._log()

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        # One line per request is written by _log, after the reply is sent.
        pass

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"{self.address_string()} {format % args}\n")

    def _log(self, t0: float | None = None) -> None:
        ms = f" {(time.monotonic() - t0) * 1000:.1f} ms" if t0 is not None else ""
        method = getattr(self, "command", None) or "-"
        path = getattr(self, "path", None) or "-"
        sys.stderr.write(f"{self.address_string()} {method} {path} {self._status}{ms}\n")
        sys.stderr.flush()

    def _handle(self, route: Any) -> None:
        t0 = time.monotonic()
        try:
            route()
        except RequestError as e:
            self._json(e.status, {"error": e.reason})
        except (Error, SQLAlchemyError) as e:
            status = e.http_status if isinstance(e, Error) else 500
            if isinstance(e, Error) and status < 500:
                self._json(status, {"error": e.reason()})
            else:
                # Configuration and database trouble is the operator's to read, not the client's.
                detail = e.reason() if isinstance(e, Error) else str(getattr(e, "orig", None) or e)
                first = (detail.strip().splitlines() or [type(e).__name__])[0]
                sys.stderr.write(f"ledger serve: {self.command} {self.path}: {first}\n")
                self._json(500, {"error": "the ledger server could not complete the request"})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return
        except Exception:
            traceback.print_exc(file=sys.stderr)
            self._json(500, {"error": "internal server error"})
        self._log(t0)

    def _path(self) -> str:
        return urllib.parse.urlsplit(self.path).path

    # -- routes ------------------------------------------------------------------

    def do_GET(self) -> None:
        self._handle(self._get)

    def do_POST(self) -> None:
        self._handle(self._post)

    def _get(self) -> None:
        path = self._path()
        if path == "/healthz":
            self._json(200, {"ok": True, "entries": self.ledger.request_store().size()})
            return
        if path == "/v1/checkpoint":
            row = self.ledger.request_store().latest_checkpoint()
            if row is None:
                raise RequestError(404, "no checkpoint has been signed yet")
            self._reply(200, row.note.encode(), "text/plain; charset=utf-8")
            return
        if path == "/v1/log/consistency":
            self._consistency()
            return
        for prefix, route in (
            ("/v1/entries/", self._entry),
            ("/v1/bundles/", self._bundle),
            ("/v1/log/proof/", self._proof),
        ):
            if path.startswith(prefix):
                ref = urllib.parse.unquote(path.removeprefix(prefix))
                if not ref or "/" in ref:
                    raise RequestError(404, f"no such resource {path}")
                route(ref)
                return
        if path == "/v1/envelopes":
            raise RequestError(405, "POST envelopes here; read entries at /v1/entries/<id>")
        raise RequestError(404, f"no such resource {path}")

    def _entry(self, ref: str) -> None:
        self._json(200, show_document(self.ledger.request_store(), ref))

    def _proof(self, ref: str) -> None:
        store = self.ledger.request_store()
        e = store.resolve(ref)
        self._json(200, inclusion(store, e.seq, self.ledger.keys).to_json(e.entry_id))

    def _consistency(self) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        store = self.ledger.request_store()

        def size(name: str) -> int | None:
            values = query.get(name)
            if not values:
                return None
            text = values[0]
            if not text.isdigit() or len(text) > 19 or not 1 <= int(text) <= MAX_INT:
                raise RequestError(400, f"{name}={text[:30]!r}: expected a size 1..2^63-1")
            return int(text)

        old, new = size("from"), size("to")
        if old is None:
            raise RequestError(400, "from=SIZE is required")
        if new is None:
            latest = store.latest_checkpoint()
            if latest is None:
                raise RequestError(404, "no checkpoint has been signed yet")
            new = latest.size
        note, proof = prove(store, old, new)
        self._json(
            200,
            {
                "old": old,
                "new": new,
                "proof": [h.hex() for h in proof],
                "checkpoint": note.decode(),
            },
        )

    def _bundle(self, ref: str) -> None:
        data = export(self.ledger.request_store(), ref, self.ledger.keys)
        self._reply(200, data)

    def _post(self) -> None:
        path = self._path()
        if path != "/v1/envelopes":
            raise RequestError(404 if not path.startswith("/v1/") else 405, f"cannot POST {path}")
        body = self._body()
        try:
            doc = load_json(body, "")
        except InputError as e:
            raise RequestError(400, e.reason()) from None
        items = [doc] if isinstance(doc, dict) else doc
        if not isinstance(items, list) or not items:
            raise RequestError(400, "expected a DSSE envelope or a non-empty array of them")
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise RequestError(400, f"input {i + 1}: not a JSON object")
        # Re-serializing is safe: the signature covers only the payload bytes,
        # which travel base64-encoded inside the envelope and are not touched.
        raws = [json.dumps(item).encode() for item in items]
        recs = record(self.ledger.request_store(), raws)
        out = [r.to_json() for r in recs]
        self._json(200 if all(r.duplicate for r in recs) else 201, out)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise RequestError(411, "send the body with a Content-Length (no chunked encoding)")
        length = self.headers.get("Content-Length")
        if length is None:
            self.close_connection = True
            raise RequestError(411, "a Content-Length is required")
        try:
            n = int(length)
        except ValueError:
            self.close_connection = True
            raise RequestError(400, f"bad Content-Length {length!r}") from None
        if n < 0:
            self.close_connection = True
            raise RequestError(400, f"bad Content-Length {length!r}")
        if n > MAX_BODY_BYTES:
            # The body is left unread, so this connection cannot carry another request.
            self.close_connection = True
            raise RequestError(
                413, f"request body is {n} bytes, over the {MAX_BODY_BYTES}-byte limit"
            )
        data = self.rfile.read(n)
        if len(data) != n:
            self.close_connection = True
            raise RequestError(400, f"body ended after {len(data)} of {n} bytes")
        return data


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


def make_server(store_url: str, host: str, port: int, keys: KeyDir | None) -> LedgerServer:
    """Open the ledger and bind; port 0 picks a free port (see `.server_address`)."""
    store = Store.open(store_url)
    try:
        return LedgerServer((host, port), store, _signing_keys(store, keys))
    except OSError as e:
        store.engine.dispose()
        raise UsageError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def _safe_url(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def serve(
    store_url: str,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    keys: KeyDir | None = None,
) -> None:
    """Serve until Ctrl-C; requests in flight are finished before it returns."""
    server = make_server(store_url, host, port, keys)
    signing = "signs fresh checkpoints" if server.keys else "serves stored checkpoints only"
    sys.stderr.write(
        f"ledger serve: {_safe_url(store_url)} at {server.url} ({signing}); Ctrl-C stops\n"
    )
    sys.stderr.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.stderr.write("ledger serve: stopping\n")
    finally:
        server.server_close()
        server.store.engine.dispose()
