"""The witness over HTTP: `POST <prefix>/add-checkpoint` (C2SP tlog-witness).

A small threaded stdlib server: one request is a few hundred bytes and one
SQLite transaction, and the witness needs nothing of the ledger's server.

A thread serves each open connection, so what a client can hold is bounded as
`ledger serve` bounds it (`ledger.service.guard`): a connection must deliver
each whole request (headers and body) within `timeout_s` of its opening or of
the previous answer, or it is cut, idle or trickling alike; one client (its
address's /24 or /64, each loopback address its own: `client_key`) holds at
most `max_per_client` connections, the server at most `max_connections`. Past
either cap a newcomer takes the place of the least recently active idle
connection of its own client, else of the clients holding the most, or is
closed at once when none is idle. Without this, 300 idle sockets held 301
threads for good.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ledger.service.guard import client_key
from ledger.transparency.witness import Answer, Witness

__all__ = ["MAX_CONNECTIONS", "MAX_PER_CLIENT", "TIMEOUT_S", "WitnessServer"]

# old line, 63 proof lines of 45 bytes, a checkpoint with a few dozen signatures.
MAX_BODY = 64 * 1024
TIMEOUT_S = 10.0
"""A connection's next whole request must arrive within this (idle ones are cut)."""
MAX_CONNECTIONS = 64
"""Open connections, and so handler threads, across the server."""
MAX_PER_CLIENT = 16
"""Open connections one client (address prefix) may hold."""

_order = itertools.count()


@dataclass
class _Conn:
    sock: socket.socket
    key: str
    since: int
    """Order of its last activity (opened, or answered)."""
    deadline: float | None
    """When the connection is cut unless a whole request came; None while one is answered."""


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # A backstop for one blocking read or write; the whole request's deadline is the
        # server's reaper.
        self.connection.settimeout(self.server.timeout_s)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the answer is the record."""

    def _answer(self, a: Answer) -> None:
        self.send_response(a.status)
        self.send_header("Content-Type", a.content_type)
        self.send_header("Content-Length", str(len(a.body)))
        self.end_headers()
        self.wfile.write(a.body)
        self.wfile.flush()
        self.server.waiting(self.connection)

    def do_POST(self) -> None:
        if self.path.split("?")[0] != self.server.prefix + "/add-checkpoint":
            self.close_connection = True  # its body, unread, is no next request
            self._answer(Answer(404, "text/plain", b"not found\n"))
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self.close_connection = True
            self._answer(Answer(411, "text/plain", b"Content-Length required\n"))
            return
        if not 0 <= length <= MAX_BODY:
            self.close_connection = True
            self._answer(Answer(413, "text/plain", b"request body too large\n"))
            return
        body = self.rfile.read(length)
        if len(body) < length:  # cut at its deadline, or the client went away
            self.close_connection = True
            return
        # The request is whole: no deadline while the witness checks and stores it.
        self.server.answering(self.connection)
        self._answer(self.server.witness.add_checkpoint(body))

    def do_GET(self) -> None:
        self._answer(Answer(405, "text/plain", b"POST add-checkpoint\n"))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # A burst of connects waits in the kernel's queue, not in SYN retries.
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        witness: Witness,
        prefix: str,
        timeout_s: float,
        max_connections: int,
        max_per_client: int,
    ) -> None:
        super().__init__(address, _Handler)
        self.witness, self.prefix = witness, prefix.rstrip("/")
        self.timeout_s = timeout_s
        self._max, self._max_per_client = max_connections, max_per_client
        self._cond = threading.Condition()
        self._conns: dict[socket.socket, _Conn] = {}
        self._closing = False
        self._reaper = threading.Thread(target=self._reap, name="witness-reaper", daemon=True)
        self._reaper.start()

    @property
    def open_connections(self) -> int:
        with self._cond:
            return len(self._conns)

    def process_request(self, request: Any, client_address: Any) -> None:
        key = client_key(str(client_address[0]) if client_address else None)
        with self._cond:
            admitted = self._admit(key)
            if admitted:
                self._conns[request] = _Conn(
                    request, key, next(_order), time.monotonic() + self.timeout_s
                )
                self._cond.notify()
        if not admitted:
            # Closed before a byte is read: this client's share, or the server, is busy.
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def _admit(self, key: str) -> bool:
        """Room for one more connection of `key`, made by cutting an idle one if need be."""
        mine = [c for c in self._conns.values() if c.key == key]
        if len(mine) >= self._max_per_client and not self._evict(mine):
            return False
        if len(self._conns) < self._max:
            return True
        idle = [c for c in self._conns.values() if c.deadline is not None]
        if not idle:
            return False
        counts: dict[str, int] = {}
        for c in idle:
            counts[c.key] = counts.get(c.key, 0) + 1
        most = max(counts.values())
        return self._evict([c for c in idle if counts[c.key] == most])

    def _evict(self, group: list[_Conn]) -> bool:
        """Cut the least recently active idle connection of `group`; False when none is."""
        idle = [c for c in group if c.deadline is not None]
        if not idle:
            return False
        self._cut(min(idle, key=lambda c: c.since))
        return True

    def _cut(self, c: _Conn) -> None:
        """End `c`: its thread's blocked read returns end-of-file and the thread ends."""
        self._conns.pop(c.sock, None)
        with contextlib.suppress(OSError):  # already gone
            c.sock.shutdown(socket.SHUT_RDWR)

    def answering(self, sock: socket.socket) -> None:
        with self._cond:
            c = self._conns.get(sock)
            if c is not None:
                c.deadline = None

    def waiting(self, sock: socket.socket) -> None:
        """The connection awaits its next request: the deadline starts again."""
        with self._cond:
            c = self._conns.get(sock)
            if c is not None:
                c.deadline = time.monotonic() + self.timeout_s
                c.since = next(_order)  # active just now: not the first to give way
                self._cond.notify()

    def _reap(self) -> None:
        with self._cond:
            while not self._closing:
                now = time.monotonic()
                for c in [c for c in self._conns.values() if c.deadline is not None]:
                    if c.deadline is not None and c.deadline <= now:
                        self._cut(c)
                due = [c.deadline for c in self._conns.values() if c.deadline is not None]
                self._cond.wait(min(due) - now if due else None)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client gone, or cut at its deadline, mid-answer is no error of the witness's.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._cond:
            self._conns.pop(request, None)
        super().shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        with self._cond:
            self._closing = True
            for c in list(self._conns.values()):
                self._cut(c)
            self._cond.notify()
        self._reaper.join()


class WitnessServer:
    """A witness listening on `host:port` (port 0: any free port). It is bound,
    and so ready for requests, once constructed; `serve_forever` or `start`
    (a background thread) answers them, `close` stops."""

    def __init__(
        self,
        witness: Witness,
        host: str,
        port: int,
        prefix: str = "",
        *,
        timeout_s: float = TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        max_per_client: int = MAX_PER_CLIENT,
    ) -> None:
        self._server = _Server(
            (host, port), witness, prefix, timeout_s, max_connections, max_per_client
        )
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else str(host)
        shown = f"[{name}]" if ":" in name else name
        return f"http://{shown}:{port}{self._server.prefix}"

    @property
    def open_connections(self) -> int:
        """Connections held now (each with its thread)."""
        return self._server.open_connections

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
