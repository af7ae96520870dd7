"""What one client can hold of the server: connections, and time to send headers.

uvicorn caps open connections for everyone at once (`limit_concurrency`) and
has no deadline for a request's headers, so one client holding 260 silent
sockets, or trickling one header byte every 25 s, made every other client get
503. This protocol adds, per connection: a cap on the connections one client
address holds (past it, a new connection is closed at once) and a deadline
for the headers of each request (a connection still without them is closed).
The body and the request as a whole are bounded by `ledger.service.limits`.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["HEADER_TIMEOUT_S", "MAX_PER_CLIENT", "guarded_protocol"]

HEADER_TIMEOUT_S = 10.0
"""A request's headers must arrive within this from the connection (or the last reply)."""
MAX_PER_CLIENT = 32
"""Open connections one client address may hold; the next ones are closed at once."""

_END = b"\r\n\r\n"


def _host(protocol: object) -> str | None:
    client = getattr(protocol, "client", None)
    return str(client[0]) if client else None


def guarded_protocol(header_timeout_s: float, max_per_client: int) -> type[Any]:
    """The uvicorn `http` protocol class with these bounds."""
    # uvicorn is the server extra's: imported only when a server is built.
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class _Guarded(H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._tail = b""
            self._header_timer: asyncio.TimerHandle | None = None
            host = self.client[0] if self.client else None
            held = sum(1 for c in self.connections if _host(c) == host)
            if host is not None and held > max_per_client:
                # Closed before a byte is read: this client already holds its share.
                transport.abort()
                return
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._tail = b""
            self._header_timer = self.loop.call_later(header_timeout_s, self._headers_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            # Only a connection between requests is cut: a request in flight has its deadline.
            if self.cycle is None or self.cycle.response_complete:
                self.transport.abort()

        def data_received(self, data: bytes) -> None:
            if self._header_timer is not None:
                seen = self._tail + data
                if _END in seen:
                    self._disarm()
                else:
                    self._tail = seen[-3:]
            super().data_received(data)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    _Guarded.__name__ = "GuardedH11Protocol"
    return _Guarded
