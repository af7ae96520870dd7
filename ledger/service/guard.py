"""What one client can hold of the server: connections, and time to send headers.

uvicorn caps open connections for everyone at once (`limit_concurrency`) and
has no deadline for a request's headers, so one client holding 260 silent
sockets, or trickling one header byte every 25 s, made every other client get
503; nine loopback addresses with 32 idle sockets each did the same to a cap
per address. This protocol adds, per connection:

- a key for the client that cannot multiply cheaply: the bearer token once a
  request shows a known one, else the address's /24 (IPv4) or /64 (IPv6)
  prefix, and a loopback address as itself (below);
- a cap on the connections one key holds: past it, a new connection takes the
  place of that key's least recently active idle one (closed), or is closed at
  once when none is idle, so a client's own flood never shuts out a newcomer
  from its prefix;
- a cap on idle connections across the server: past it, the least recently
  active idle connection of the keys holding the most is closed, so `/healthz`
  and token-holding clients stay answered whatever addresses a flood comes from;
- a deadline for the headers of each request (a connection still without
  them is closed).

Loopback addresses are each their own client. Any local process can bind any
of 127.0.0.0/8, so no prefix of it bounds a local flood: the idle cap across
the server does, where a flood is always the heaviest. Counting all of
loopback as one client put every local client (a reverse proxy, the CLI beside
a flood) in the flooder's 32 places: while nine loopback addresses kept
connecting, 7 of 49 requests of another loopback client failed.

The body and the request as a whole are bounded by `ledger.service.limits`.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import itertools
import re
from collections.abc import Callable
from typing import Any

__all__ = ["HEADER_TIMEOUT_S", "MAX_IDLE", "MAX_PER_CLIENT", "client_key", "guarded_protocol"]

HEADER_TIMEOUT_S = 10.0
"""A request's headers must arrive within this from the connection (or the last reply)."""
MAX_PER_CLIENT = 32
"""Open connections one client (token, else address prefix) may hold."""
MAX_IDLE = 64
"""Idle connections across the server (below uvicorn's `limit_concurrency`)."""

_END = b"\r\n\r\n"
_BEARER = re.compile(rb"(?im)^authorization:[ \t]*bearer[ \t]+([^\r\n]+?)[ \t]*\r?$")
_order = itertools.count()


def client_key(host: str | None) -> str:
    """The prefix an anonymous client is counted by: its /24, or /64 for IPv6 (an
    IPv4-mapped address as IPv4); a loopback address is its own."""
    if host is None:
        return "?"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return str(ip)
    bits = 24 if ip.version == 4 else 64
    return str(ipaddress.ip_network(f"{ip}/{bits}", strict=False))


def guarded_protocol(
    header_timeout_s: float,
    max_per_client: int,
    known_token: Callable[[str], bool] | None = None,
    max_idle: int = MAX_IDLE,
) -> type[Any]:
    """The uvicorn `http` protocol class with these bounds; `known_token` says whether
    a bearer token is one the server accepts (a connection that shows one is counted
    by it from then on)."""
    # uvicorn is the server extra's: imported only when a server is built.
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class _Guarded(H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._tail = b""
            self._head = b""
            self._header_timer: asyncio.TimerHandle | None = None
            self._key = client_key(self.client[0] if self.client else None)
            self._since = next(_order)
            mine = [c for c in self._others() if c._key == self._key]
            if len(mine) >= max_per_client and not self._evict(mine):
                # Closed before a byte is read: this client's share is busy.
                self._drop()
                return
            idle = [c for c in self._others() if c._idle()]
            if len(idle) >= max_idle:
                counts: dict[str, int] = {}
                for c in idle:
                    counts[c._key] = counts.get(c._key, 0) + 1
                most = max(counts.values())
                # Of all the keys holding the most (a flood of one connection an
                # address ties with a client's one), the least recently active.
                self._evict([c for c in idle if counts[c._key] == most])
            self._arm()

        def _others(self) -> list[Any]:
            return [
                c
                for c in self.connections
                if c is not self and hasattr(c, "_key") and not c.transport.is_closing()
            ]

        def _idle(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        @staticmethod
        def _evict(group: list[Any]) -> bool:
            """Close the least recently active idle connection of `group` (opened or
            answered longest ago); False when none is idle."""
            idle = [c for c in group if c._idle()]
            if not idle:
                return False
            min(idle, key=lambda c: c._since)._drop()
            return True

        def _drop(self) -> None:
            """Close this connection, and stop counting it at once: uvicorn counts it
            against `limit_concurrency` until its connection_lost, a loop turn later,
            and a burst of accepts in one turn then answered every request 503."""
            self.transport.abort()
            self.connections.discard(self)

        def _by_token(self, head: bytes) -> None:
            """Count this connection by its token, once a request shows a known one."""
            m = _BEARER.search(head)
            if m is None or known_token is None:
                return
            token = m.group(1).decode("latin-1").strip()
            if not known_token(token):
                return
            key = "token:" + hashlib.sha256(token.encode()).hexdigest()
            if key == self._key:
                return
            self._key = key
            mine = [c for c in self._others() if c._key == key]
            if len(mine) >= max_per_client:
                self._evict(mine)

        def _arm(self) -> None:
            self._disarm()
            self._tail = b""
            self._head = b""
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
                # The headers (bounded: uvicorn refuses larger ones) for the token.
                self._head = (self._head + data)[: 64 * 1024]
                if _END in seen:
                    self._disarm()
                    self._by_token(self._head)
                else:
                    self._tail = seen[-3:]
            super().data_received(data)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # Active just now: a keep-alive client's connection is not taken for a
            # stale one when a newcomer needs its place.
            self._since = next(_order)
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    _Guarded.__name__ = "GuardedH11Protocol"
    return _Guarded
