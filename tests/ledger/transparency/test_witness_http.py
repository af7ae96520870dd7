"""`ledger witness serve` outlasts idle and slow clients: their connections are cut
and its threads are bounded, while other clients' checkpoints are cosigned."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.service.witness_http import MAX_CONNECTIONS, MAX_PER_CLIENT, WitnessServer
from ledger.transparency.collect import request_body
from tests.ledger.transparency.conftest import Ledger, Witnesses, ok
from tests.ledger.transparency.test_witness import post

ATTACKER = "127.0.0.2"
"""Another loopback address than the log's: the client holding sockets."""


def _sockets(url: str, n: int, source: str = ATTACKER) -> list[socket.socket]:
    port = int(url.rsplit(":", 1)[1])
    out = []
    for _ in range(n):  # bounded: n connects, each with a deadline
        s = socket.socket()
        s.settimeout(10)
        s.bind((source, 0))
        s.connect(("127.0.0.1", port))
        out.append(s)
    return out


def _closed_by_server(s: socket.socket, bound_s: float = 30) -> bool:
    """Reads until the server closes the socket (end of file or reset); False when
    `bound_s` passes first. The wait is on the socket, never a sleep."""
    s.settimeout(bound_s)
    try:
        while s.recv(4096):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


@pytest.fixture
def note(ledger: Ledger) -> bytes:
    ledger.record(2)
    return ok(ledger("log", "checkpoint")).out.encode()


@pytest.fixture
def quick(witnesses: Witnesses) -> Iterator[WitnessServer]:
    """w1 again, on its own port, cutting a connection without a whole request in 2 s."""
    server = WitnessServer(witnesses.witness("w1"), "127.0.0.1", 0, timeout_s=2).start()
    yield server
    server.close()


def test_300_idle_sockets_to_a_witness_are_cut_and_its_threads_bounded(
    witnesses: Witnesses, note: bytes
) -> None:
    url = witnesses.urls["w1"]
    before = threading.active_count()
    held = _sockets(url, 300)
    try:
        # Past a client's share, its new connections take the place of its oldest idle
        # ones, which are closed: the first is gone, and no thread waits on it.
        assert _closed_by_server(held[0])
        server = witnesses.servers["w1"]
        assert server.open_connections <= MAX_PER_CLIENT
        assert threading.active_count() - before <= MAX_CONNECTIONS
        # Another client is answered meanwhile.
        assert post(url, request_body(0, [], note))[0] == 200
    finally:
        for s in held:
            s.close()


def test_idle_keep_alive_and_trickling_connections_are_cut(
    quick: WitnessServer, note: bytes
) -> None:
    [idle] = _sockets(quick.url, 1, "127.0.0.1")
    assert _closed_by_server(idle)
    # A keep-alive connection after its answer: the next request must come in time too.
    [kept] = _sockets(quick.url, 1, "127.0.0.1")
    body = request_body(0, [], note)
    kept.sendall(
        b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    )
    answer = kept.recv(4096)
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    assert _closed_by_server(kept)
    # Headers begun, never finished.
    [trickle] = _sockets(quick.url, 1, "127.0.0.1")
    trickle.sendall(b"POST /add-checkpoint HTTP/1.1\r\nContent-Le")
    assert _closed_by_server(trickle)
    assert quick.open_connections == 0


def test_a_body_that_never_comes_is_cut(quick: WitnessServer, tmp_path: Path) -> None:
    [s] = _sockets(quick.url, 1, "127.0.0.1")
    s.sendall(b"POST /add-checkpoint HTTP/1.1\r\nContent-Length: 500\r\n\r\nold 0\n")
    assert _closed_by_server(s)


def test_past_the_server_wide_cap_a_newcomer_takes_an_idle_ones_place(
    witnesses: Witnesses, note: bytes
) -> None:
    server = WitnessServer(
        witnesses.witness("w1"), "127.0.0.1", 0, max_connections=12, max_per_client=100
    ).start()
    held = _sockets(server.url, 12)
    try:
        assert post(server.url, request_body(0, [], note))[0] == 200
        assert _closed_by_server(held[0])
        assert server.open_connections <= 12
    finally:
        for s in held:
            s.close()
        server.close()
