"""`ledger serve` (ledger.service under uvicorn) and its client over real HTTP on 127.0.0.1,
against SQLite and PostgreSQL."""

from __future__ import annotations

import base64
import http.server
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.client import HTTPConnection
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import pytest

from ledger.evidence.dsse import MAX_ENVELOPE_BYTES
from ledger.evidence.errors import NotFoundError, RefusedError, UnreachableError, UsageError
from ledger.evidence.keys import KeyDir, LocalKey
from ledger.remote import client
from ledger.service.limits import MAX_BODY_BYTES
from ledger.service.run import Running, start
from ledger.store.store import Store
from ledger.verify import verify_bundle
from tests.ledger.factories import dump, envelope
from tests.ledger.helpers import run


@dataclass
class Served:
    url: str
    store: Store
    keys: KeyDir
    runner: LocalKey


def _start(db_url: str, keys: KeyDir | None) -> Running:
    return start(db_url, keys)


def _init(db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LEDGER_DB", db_url)
    for args in (("init",), ("keys", "new", "runner", "--role", "runner")):
        r = run(capsys, *args)
        assert r.code == 0, r.err


@pytest.fixture
def served(
    db_url: str,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[Served]:
    """A ledger with a runner key, served (with its ledger key) on a free port."""
    _init(db_url, monkeypatch, capsys)
    keys = KeyDir(key_dir)
    server = _start(db_url, keys)
    store = Store.open(db_url)
    try:
        yield Served(server.url, store, keys, keys.load("runner"))
    finally:
        server.stop()
        store.engine.dispose()


def request(
    url: str,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, str, bytes]:
    """One raw request: (status, content type, body)."""
    u = urlsplit(url)
    conn = HTTPConnection(u.hostname or "", u.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type") or "", resp.read()
    finally:
        conn.close()


def error_of(status_body: tuple[int, str, bytes]) -> tuple[int, str]:
    status, ctype, body = status_body
    assert ctype == "application/json"
    doc = json.loads(body)
    assert list(doc) == ["error"] and "\n" not in doc["error"] and "Traceback" not in doc["error"]
    return status, str(doc["error"])


def _tampered(raw: bytes) -> bytes:
    env = json.loads(raw)
    payload = bytearray(base64.b64decode(env["payload"]))
    payload[payload.index(b"passed")] = ord("P")
    env["payload"] = base64.b64encode(bytes(payload)).decode()
    return json.dumps(env).encode()


def test_post_records_then_reports_duplicates(served: Served) -> None:
    raws = [envelope(served.runner), envelope(served.runner, claim="other.claim")]
    status, _, body = request(served.url, "POST", "/v1/envelopes", b"[" + b",".join(raws) + b"]")
    first = json.loads(body)
    assert status == 201
    assert [(d["kind"], d["duplicate"]) for d in first] == [("receipt", False)] * 2
    assert [d["seq"] for d in first] == [2, 3]  # after the ledger and runner key entries
    assert all(served.store.entry(d["id"]) is not None for d in first)

    # One bare envelope is accepted too; a batch of duplicates is 200 and writes nothing.
    before = dump(served.store)
    status, _, body = request(served.url, "POST", "/v1/envelopes", raws[0])
    assert status == 200
    assert json.loads(body) == [{**first[0], "seq": None, "duplicate": True}]
    again = client.post_envelopes(served.url, raws)
    assert [(d["id"], d["duplicate"], d["seq"]) for d in again] == [
        (d["id"], True, None) for d in first
    ]
    assert dump(served.store) == before
    assert client.health(served.url) == {"ok": True, "entries": 4}


def test_refused_batch_writes_nothing(served: Served) -> None:
    good, bad = envelope(served.runner), _tampered(envelope(served.runner, claim="x"))
    before = dump(served.store)
    body = json.dumps([json.loads(good), json.loads(bad)]).encode()
    status, reason = error_of(request(served.url, "POST", "/v1/envelopes", body))
    assert status == 400
    assert reason.startswith("input 2: ") and "invalid signature" in reason, reason
    with pytest.raises(RefusedError, match="invalid signature") as e:
        client.post_envelopes(served.url, [good, bad])
    assert e.value.reason() == reason
    assert dump(served.store) == before


def test_keys_registered_after_start_count(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    """The server reads the key table per request: new keys and revocations apply at once."""
    assert run(capsys, "keys", "new", "late", "--role", "runner").code == 0
    late = served.keys.load("late")
    [rec] = client.post_envelopes(served.url, [envelope(late)])
    assert rec["duplicate"] is False
    assert run(capsys, "keys", "revoke", "late", "--reason", "host retired").code == 0
    with pytest.raises(RefusedError, match="was revoked: host retired"):
        client.post_envelopes(served.url, [envelope(late, claim="after.revocation")])


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "malformed JSON"),
        (b"[]", "non-empty array"),
        (b"42", "non-empty array"),
        (b"[1]", "input 1: not a JSON object"),
        (b'{"payloadType": "x"}', "malformed DSSE envelope"),
    ],
)
def test_malformed_bodies_are_400(served: Served, body: bytes, reason: str) -> None:
    before = dump(served.store)
    status, got = error_of(request(served.url, "POST", "/v1/envelopes", body))
    assert (status, reason in got) == (400, True), got
    assert dump(served.store) == before


def test_oversized_body_is_413_unread(served: Served) -> None:
    assert MAX_BODY_BYTES == client.MAX_BODY_BYTES == 16 * MAX_ENVELOPE_BYTES
    # Announce a body one byte over the limit and send none of it: the server
    # must answer from the header alone.
    u = urlsplit(served.url)
    conn = HTTPConnection(u.hostname or "", u.port, timeout=10)
    try:
        conn.putrequest("POST", "/v1/envelopes")
        conn.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
        conn.endheaders()
        resp = conn.getresponse()
        doc = json.loads(resp.read())
    finally:
        conn.close()
    assert resp.status == 413
    assert doc == {
        "error": f"request body is {MAX_BODY_BYTES + 1} bytes, over the {MAX_BODY_BYTES}-byte limit"
    }
    # The client refuses such a batch itself, before sending anything.
    big = json.dumps({"payload": "A" * MAX_BODY_BYTES}).encode()
    with pytest.raises(RefusedError, match="request limit"):
        client.post_envelopes(served.url, [big])


def test_entry_by_prefix_is_the_show_document(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    [rec] = client.post_envelopes(served.url, [envelope(served.runner)])
    prefix = rec["id"].removeprefix("sha256:")[:12]
    doc = client.fetch_entry(served.url, prefix)
    shown = run(capsys, "show", prefix, "--json")
    assert shown.code == 0, shown.err
    assert doc == json.loads(shown.out)
    assert client.fetch_entry(served.url, rec["id"]) == doc

    unknown = "ab" * 32
    assert error_of(request(served.url, "GET", f"/v1/entries/{unknown}"))[0] == 404
    with pytest.raises(NotFoundError, match="no receipt or review matches"):
        client.fetch_entry(served.url, unknown)
    status, reason = error_of(request(served.url, "GET", "/v1/entries/not-an-id"))
    assert status == 400 and "is not a receipt id" in reason
    assert error_of(request(served.url, "GET", "/v1/nothing"))[0] == 404
    assert error_of(request(served.url, "GET", "/v1/envelopes"))[0] == 405
    assert error_of(request(served.url, "DELETE", "/v1/envelopes"))[0] == 405


def test_bundle_verifies_offline(served: Served) -> None:
    [rec] = client.post_envelopes(served.url, [envelope(served.runner)])
    # The server holds the ledger key, so the write came with the checkpoint the
    # bundle needs (a read never signs one).
    raw = client.fetch_bundle(served.url, rec["id"])
    report = verify_bundle(raw, [served.keys.load("ledger").public])
    assert (report.id, report.kind, report.signer) == (rec["id"], "receipt", served.runner.keyid)
    note = client.fetch_checkpoint(served.url)
    assert note.decode() == json.loads(raw)["checkpoint"]


def test_without_ledger_key_bundles_wait_for_a_checkpoint(
    db_url: str,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _init(db_url, monkeypatch, capsys)
    runner = KeyDir(key_dir).load("runner")
    server = _start(db_url, None)
    try:
        [rec] = client.post_envelopes(server.url, [envelope(runner)])
        status, reason = error_of(request(server.url, "GET", f"/v1/bundles/{rec['id']}"))
        assert status == 404 and "no checkpoint covers this entry yet" in reason
        assert run(capsys, "log", "checkpoint").code == 0
        status, ctype, body = request(server.url, "GET", "/v1/checkpoint")
        assert (status, ctype) == (200, "text/plain; charset=utf-8")
        raw = client.fetch_bundle(server.url, rec["id"])
        assert json.loads(raw)["checkpoint"] == body.decode()
        verify_bundle(raw, [KeyDir(key_dir).load("ledger").public])
    finally:
        server.stop()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_client_reports_an_unreachable_server(monkeypatch: pytest.MonkeyPatch) -> None:
    # Once the retries are spent, as at once without them (they are held below).
    monkeypatch.setenv(client.RETRIES_VAR, "0")
    url = f"http://127.0.0.1:{_closed_port()}"
    calls: list[Any] = [
        lambda: client.post_envelopes(url, [b"{}"]),
        lambda: client.fetch_bundle(url, "ab" * 32),
        lambda: client.health(url),
    ]
    for call in calls:
        with pytest.raises(UnreachableError) as e:
            call()
        # Infrastructure, which a CI retries: never the usage error a bad URL is.
        assert e.value.exit_code == 3
        assert e.value.reason().startswith(f"cannot reach ledger server at {url}: ")
        assert "\n" not in e.value.reason()
    with pytest.raises(UsageError, match="expected http://HOST:PORT"):
        client.health("127.0.0.1:8765")


class _Restarting(http.server.BaseHTTPRequestHandler):
    """A server that answers every request 503 (a restart in progress), counted."""

    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Restarting.seen.append(self.path)
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize(("setting", "attempts"), [(None, 1 + client.RETRIES), ("1", 2), ("0", 1)])
def test_the_client_retries_as_many_times_as_it_is_told(
    monkeypatch: pytest.MonkeyPatch, setting: str | None, attempts: int
) -> None:
    if setting is None:
        monkeypatch.delenv(client.RETRIES_VAR, raising=False)
    else:
        monkeypatch.setenv(client.RETRIES_VAR, setting)
    # The waits between attempts are the product's; not this test's to sit through.
    waited: list[float] = []
    monkeypatch.setattr(client.time, "sleep", waited.append)
    _Restarting.seen = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Restarting)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with pytest.raises(UnreachableError):
            client.health(f"http://127.0.0.1:{srv.server_address[1]}")
    finally:
        srv.shutdown()
        srv.server_close()
    assert len(_Restarting.seen) == attempts
    assert waited == [0.5 * 2**i for i in range(attempts - 1)]


@pytest.mark.parametrize("bad", ["-1", "x", "11", "1.5"])
def test_a_bad_retry_count_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    monkeypatch.setenv(client.RETRIES_VAR, bad)
    with pytest.raises(UsageError, match="LEDGER_SERVER_RETRIES must be a whole number"):
        client.health(f"http://127.0.0.1:{_closed_port()}")


def test_internal_errors_do_not_leak(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(store: Store, ref: str) -> dict[str, Any]:
        raise RuntimeError("secret detail")

    monkeypatch.setattr("ledger.read.query.show_document", broken)
    status, reason = error_of(request(served.url, "GET", "/v1/entries/" + "ab" * 32))
    assert (status, reason) == (500, "internal server error")
    # The server keeps serving after it.
    assert client.health(served.url)["ok"] is True
