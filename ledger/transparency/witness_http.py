"""The witness over HTTP: `POST <prefix>/add-checkpoint` (C2SP tlog-witness).

A small threaded stdlib server: one request is a few hundred bytes and one
SQLite transaction, and the witness needs nothing of the ledger's server.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ledger.transparency.witness import Answer, Witness

__all__ = ["WitnessServer"]

# old line, 63 proof lines of 45 bytes, a checkpoint with a few dozen signatures.
MAX_BODY = 64 * 1024


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the answer is the record."""

    def _answer(self, a: Answer) -> None:
        self.send_response(a.status)
        self.send_header("Content-Type", a.content_type)
        self.send_header("Content-Length", str(len(a.body)))
        self.end_headers()
        self.wfile.write(a.body)

    def do_POST(self) -> None:
        if self.path.split("?")[0] != self.server.prefix + "/add-checkpoint":
            self._answer(Answer(404, "text/plain", b"not found\n"))
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._answer(Answer(411, "text/plain", b"Content-Length required\n"))
            self.close_connection = True
            return
        if not 0 <= length <= MAX_BODY:
            self._answer(Answer(413, "text/plain", b"request body too large\n"))
            self.close_connection = True
            return
        self._answer(self.server.witness.add_checkpoint(self.rfile.read(length)))

    def do_GET(self) -> None:
        self._answer(Answer(405, "text/plain", b"POST add-checkpoint\n"))


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], witness: Witness, prefix: str) -> None:
        super().__init__(address, _Handler)
        self.witness, self.prefix = witness, prefix.rstrip("/")


class WitnessServer:
    """A witness listening on `host:port` (port 0: any free port). It is bound,
    and so ready for requests, once constructed; `serve_forever` or `start`
    (a background thread) answers them, `close` stops."""

    def __init__(self, witness: Witness, host: str, port: int, prefix: str = "") -> None:
        self._server = _Server((host, port), witness, prefix)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else str(host)
        shown = f"[{name}]" if ":" in name else name
        return f"http://{shown}:{port}{self._server.prefix}"

    def serve_forever(self) -> None:
        self._server.serve_forever(poll_interval=0.2)

    def start(self) -> WitnessServer:
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()
