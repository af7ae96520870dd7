"""The service outlasts abuse: one client's idle or trickling sockets leave other
clients served; every response carries nosniff, a frame-blocking CSP; anonymous
reads write nothing."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from ledger.evidence.keys import KeyDir
from ledger.remote import client
from ledger.service.run import Running, start
from ledger.store.store import CHECKPOINT, Store
from tests.ledger.factories import envelope
from tests.ledger.service.test_service import ledger_db

__all__ = ["ledger_db"]

ATTACKER = "127.0.0.2"
"""Another loopback address: the abusive client, apart from the one served."""


def _sockets(port: int, n: int, source: str = ATTACKER) -> list[socket.socket]:
    out = []
    for _ in range(n):  # bounded: n connects, each with a deadline
        s = socket.socket()
        s.settimeout(5)
        s.bind((source, 0))
        s.connect(("127.0.0.1", port))
        out.append(s)
    return out


def _closed_by_server(s: socket.socket, deadline_s: float) -> bool:
    """Waits (on the socket, not a sleep) until the server closes it, or the deadline."""
    s.settimeout(deadline_s)
    try:
        while True:
            data = s.recv(4096)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


@pytest.fixture
def server(ledger_db: str, key_dir: Path) -> Iterator[Running]:
    srv = start(ledger_db, KeyDir(key_dir), header_timeout_s=1.0)
    yield srv
    srv.stop()


def _port(srv: Running) -> int:
    return int(srv.url.rsplit(":", 1)[1])


def _served_within(url: str, limit_s: float) -> float:
    t0 = time.monotonic()
    r = httpx.get(url + "/healthz", timeout=limit_s)
    took = time.monotonic() - t0
    assert r.status_code == 200, r.text
    assert took < limit_s
    return took


def test_300_idle_sockets_from_one_client_leave_others_served(server: Running) -> None:
    held = _sockets(_port(server), 300)
    try:
        # Past its share, a client's new connections take the place of its oldest
        # idle ones, which are closed.
        assert _closed_by_server(held[0], 10)
        _served_within(server.url, 2.0)
    finally:
        for s in held:
            s.close()


def test_nine_loopback_addresses_with_32_idle_sockets_each_leave_healthz_answered(
    server: Running,
) -> None:
    """Nine addresses of 32 idle sockets each pass the server-wide idle cap, whose
    evictions fall on them: a tenth address's /healthz requests are all answered."""
    held = [s for i in range(2, 11) for s in _sockets(_port(server), 32, f"127.0.0.{i}")]
    try:
        with httpx.Client(
            transport=httpx.HTTPTransport(local_address="127.0.0.20"), timeout=10
        ) as c:
            codes = []
            for _ in range(50):  # a fresh connection each, as separate clients make
                codes.append(
                    c.get(server.url + "/healthz", headers={"connection": "close"}).status_code
                )
        assert codes == [200] * 50
        assert _closed_by_server(held[0], 10)  # the flood's oldest gave way
    finally:
        for s in held:
            s.close()


# Nine loopback addresses that keep connecting, each holding at most 40 sockets of its
# own, until stdin closes (or a bound on connects): a process of its own, as a flood is.
_FLOOD = """
import collections, socket, sys, threading
port, n = int(sys.argv[1]), int(sys.argv[2])
done = threading.Event()
def flood(src):
    ring = collections.deque()
    for i in range(n):
        if done.is_set():
            break
        s = socket.socket()
        s.settimeout(10)
        try:
            s.bind((src, 0))
            s.connect(("127.0.0.1", port))
            ring.append(s)
        except OSError:
            s.close()
        while len(ring) > 40:
            ring.popleft().close()
        if i == 40 and src.endswith(".2"):
            print("flooding", flush=True)
    for s in ring:
        s.close()
threads = [threading.Thread(target=flood, args=(f"127.0.0.{i}",)) for i in range(2, 11)]
for t in threads:
    t.start()
sys.stdin.read()
on = all(t.is_alive() for t in threads)
done.set()
for t in threads:
    t.join()
print("still flooding" if on else "flood over", flush=True)
"""


def test_another_loopback_client_is_served_while_nine_addresses_keep_connecting(
    server: Running,
) -> None:
    """Each loopback address is a client of its own: nine addresses that keep opening
    connections hold their own places and the server-wide idle cap's, never those of
    a tenth address making 49 requests meanwhile (7 of 49 failed while all of
    loopback was one client)."""
    import subprocess
    import sys

    flood = subprocess.Popen(
        [sys.executable, "-c", _FLOOD, str(_port(server)), "100000"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert flood.stdin is not None and flood.stdout is not None
    try:
        assert flood.stdout.readline() == "flooding\n"
        codes: list[object] = []
        with httpx.Client(
            transport=httpx.HTTPTransport(local_address="127.0.0.1"), timeout=30
        ) as c:
            for _ in range(49):  # a keep-alive connection, reused while it lasts
                try:
                    codes.append(c.get(server.url + "/healthz").status_code)
                except httpx.TransportError as e:
                    codes.append(repr(e))
    finally:
        flood.stdin.close()
        flood.wait(60)
    assert flood.stdout.read() == "still flooding\n"  # it went on through all 49
    assert codes == [200] * 49


def test_client_keys_are_prefixes() -> None:
    from ledger.service.guard import client_key

    # Each loopback address its own: any local process can bind any of 127.0.0.0/8.
    assert client_key("127.0.0.1") == "127.0.0.1" != client_key("127.0.0.2")
    assert client_key("::1") == "::1" and client_key("::ffff:127.0.0.1") == "127.0.0.1"
    assert client_key("10.1.2.3") == client_key("10.1.2.250") == "10.1.2.0/24"
    assert client_key("10.1.3.3") != client_key("10.1.2.3")
    assert (
        client_key("2001:db8:1:2::5") == client_key("2001:db8:1:2:ffff::1") == "2001:db8:1:2::/64"
    )
    assert client_key("::ffff:10.1.2.3") == "10.1.2.0/24"


def test_trickled_headers_are_cut_at_the_header_deadline(server: Running) -> None:
    held = _sockets(_port(server), 300)
    try:
        for s in held[:20]:
            s.sendall(b"G")  # one header byte, then silence
        _served_within(server.url, 2.0)
        assert _closed_by_server(held[0], 20)
    finally:
        for s in held:
            s.close()


def test_a_keep_alive_connection_must_send_its_next_headers_in_time(server: Running) -> None:
    s = socket.create_connection(("127.0.0.1", _port(server)), timeout=5)
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"200 OK" in s.recv(4096)
        s.sendall(b"GET /hea")  # the next request's headers trickle
        assert _closed_by_server(s, 20)
    finally:
        s.close()


def test_every_response_carries_nosniff_and_blocks_framing(server: Running) -> None:
    for path in ("/healthz", "/v1/keys", "/nothing-here", "/", "/static/style.css"):
        r = httpx.get(server.url + path)
        assert r.headers["x-content-type-options"] == "nosniff", path
        csp = r.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp, path


def test_anonymous_reads_write_nothing(server: Running, ledger_db: str, key_dir: Path) -> None:
    runner = KeyDir(key_dir).load("runner")
    [rec] = client.post_envelopes(server.url, [envelope(runner)])
    store = Store.open(ledger_db)

    def checkpoints() -> int:
        with store.engine.connect() as c:
            return int(c.execute(select(func.count()).select_from(CHECKPOINT)).scalar_one())

    before = checkpoints()
    assert before >= 1  # the write was vouched for by the server that holds the ledger key
    for _ in range(3):
        client.fetch_bundle(server.url, rec["id"])
        client.fetch_proof(server.url, rec["id"])
    # A receipt recorded behind the server's back: a read does not sign for it.
    from ledger.write.ingest import record

    [late] = record(store, [envelope(runner, claim="late")])
    for _ in range(3):
        with pytest.raises(Exception, match="checkpoint"):
            client.fetch_bundle(server.url, late.id)
    assert checkpoints() == before
    store.engine.dispose()


def test_an_upload_is_streamed_to_the_store_not_held_in_memory(
    ledger_db: str, key_dir: Path, tmp_path: Path
) -> None:
    import hashlib
    import tracemalloc

    from ledger.service.auth import new_token

    tokens = tmp_path / "tokens"
    token = new_token("gpu-host", tokens)
    srv = start(ledger_db, KeyDir(key_dir), tokens=tokens)
    chunk, n = b"\x5a" * (64 * 1024), 512  # 32 MiB, sent 64 KiB at a time
    digest = hashlib.sha256(chunk * n).hexdigest()

    def body() -> Iterator[bytes]:
        for _ in range(n):
            yield chunk

    try:
        tracemalloc.start()
        r = httpx.put(
            f"{srv.url}/v1/artifacts/{digest}",
            content=body(),
            headers={"Authorization": f"Bearer {token}"},
            timeout=120,
        )
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert r.status_code == 201, r.text
        assert r.json() == {"sha256": digest, "size": len(chunk) * n}
        # The whole process (server and client) never held the body, let alone twice.
        assert peak < 8 * 1024 * 1024, peak
        wrong = httpx.put(
            f"{srv.url}/v1/artifacts/{'0' * 64}",
            content=body(),
            headers={"Authorization": f"Bearer {token}"},
            timeout=120,
        )
        assert wrong.status_code == 400 and "differs from its digest" in wrong.json()["error"]
    finally:
        srv.stop()
    parts = (
        list((tmp_path / "artifacts").rglob("*.part")) if (tmp_path / "artifacts").exists() else []
    )
    assert parts == []


def _response(s: socket.socket) -> bytes:
    """One whole HTTP response (headers and a Content-Length body) read from `s`."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        got = s.recv(4096)
        if not got:
            return buf
        buf += got
    head, _, body = buf.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        got = s.recv(4096)
        if not got:
            break
        body += got
    return head + b"\r\n\r\n" + body


def test_a_token_clients_connection_is_counted_by_its_token(
    ledger_db: str, key_dir: Path, tmp_path: Path
) -> None:
    """An anonymous flood from the token holder's own prefix takes the place of the
    prefix's idle connections, never of a connection that showed a known token."""
    from ledger.service.auth import new_token

    tokens = tmp_path / "tokens"
    token = new_token("gpu-host", tokens)
    srv = start(ledger_db, KeyDir(key_dir), tokens=tokens, header_timeout_s=60.0)
    try:
        ask = f"GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n"
        mine = socket.create_connection(("127.0.0.1", _port(srv)), timeout=10)
        mine.sendall(ask.encode())
        assert _response(mine).startswith(b"HTTP/1.1 200")
        flood = _sockets(_port(srv), 40, "127.0.0.1")  # its own address, anonymous, idle
        try:
            assert _closed_by_server(flood[0], 10)  # the flood gives way to itself
            mine.sendall(ask.encode())
            assert _response(mine).startswith(b"HTTP/1.1 200")  # still held, still answered
        finally:
            for s in flood:
                s.close()
            mine.close()
    finally:
        srv.stop()
