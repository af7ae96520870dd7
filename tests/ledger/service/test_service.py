"""The service beyond the old server's endpoints: tokens, artifacts, the outbox,
request limits, and no 5xx for requests drawn from the OpenAPI document."""

from __future__ import annotations

import hashlib
import json
import socket
import time
import urllib.parse
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.evidence.errors import UsageError
from ledger.evidence.keys import KeyDir, public_pem
from ledger.evidence.models import Artifact
from ledger.evidence.statement import ArtifactFile
from ledger.remote import client
from ledger.remote.outbox import Outbox, push
from ledger.service.auth import new_token
from ledger.service.run import start
from ledger.store.store import Store
from ledger.transparency.audit import audit
from ledger.write.artifacts import SNAPSHOT_MEDIA_TYPE
from ledger.write.record import RemoteRecorder
from tests.ledger.factories import envelope
from tests.ledger.helpers import run


@pytest.fixture
def ledger_db(
    db_url: str,
    key_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> str:
    monkeypatch.setenv("LEDGER_DB", db_url)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("LEDGER_ARTIFACTS", str(tmp_path / "artifacts"))
    for args in (("init",), ("keys", "new", "runner", "--role", "runner")):
        assert run(capsys, *args).code == 0
    return db_url


def _artifact(content: bytes) -> ArtifactFile:
    a = Artifact(
        name="observer-snapshot.pickle",
        digest={"sha256": hashlib.sha256(content).hexdigest()},
        size=len(content),
        mediaType=SNAPSHOT_MEDIA_TYPE,
    )
    return ArtifactFile(a, content)


def test_tokens_guard_key_writes(ledger_db: str, key_dir: Path, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    token = new_token("ci-admin", tokens, ["keys"])
    assert token not in tokens.read_text() and "ci-admin sha256:" in tokens.read_text()
    srv = start(ledger_db, KeyDir(key_dir), tokens=tokens)
    try:
        pem = public_pem(KeyDir(key_dir).create("host7").public)
        with pytest.raises(UsageError, match="needs a token"):
            client.register_key(srv.url, "host7", "runner", pem, token=None)
        r = httpx.post(srv.url + "/v1/keys", json={"name": "host7"}, headers={})
        assert r.status_code == 401 and list(r.json()) == ["error"]
        with pytest.raises(UsageError, match="unknown token"):
            client.register_key(srv.url, "host7", "runner", pem, token="ldg_wrong")
        doc = client.register_key(srv.url, "host7", "runner", pem, token=token, hosts={"h7": []})
        assert doc["added"] is True
        assert "host7" in {k["name"] for k in client.fetch_keys(srv.url)}
        # Signed by the key itself (its holder retires it), checked by the server.
        host7 = KeyDir(key_dir).load("host7")
        client.revoke_key(srv.url, "host7", "host retired", host7, token=token)
        [k] = [k for k in client.fetch_keys(srv.url) if k["name"] == "host7"]
        assert k["revoked"] and k["revoked_reason"] == "host retired"
    finally:
        srv.stop()


def test_server_down_keeps_receipts_in_the_outbox_until_push(
    ledger_db: str,
    key_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Nothing measured is lost: the server goes away mid-run, `ledger push` delivers."""
    monkeypatch.setenv(client.RETRIES_VAR, "0")  # the server is gone: nothing to wait for
    tokens = tmp_path / "tokens"
    token = new_token("gpu-host", tokens)
    keys = KeyDir(key_dir)
    runner = keys.load("runner")
    srv = start(ledger_db, keys, tokens=tokens)
    port = int(srv.url.rsplit(":", 1)[1])
    rec = RemoteRecorder(srv.url, token)
    snap = b"\x80\x04}\x94."  # a pickled empty dict
    art = _artifact(snap)
    first = envelope(runner, claim="one", artifacts=[art.artifact.model_dump(mode="json")])
    [r1] = rec.record([first], [art])
    assert r1.seq is not None
    srv.stop()  # the server goes away in the middle of the run
    second = envelope(runner, claim="two", artifacts=[art.artifact.model_dump(mode="json")])
    third = envelope(runner, claim="three")
    [r2] = rec.record([second], [art])
    [r3] = rec.record([third])
    assert (r2.seq, r3.seq, rec.kept) == (None, None, 2)
    assert len(list(Outbox().batches())) == 2
    # Restarted on the same port and database: push delivers everything, once.
    srv = start(ledger_db, keys, tokens=tokens, port=port)
    try:
        res = push(srv.url, Outbox(), token)
        assert (res.sent, res.kept) == (2, 0)
        assert [d["id"] for d in res.recorded or []] == [r2.id, r3.id]
        assert list(Outbox().batches()) == []
        again = push(srv.url, Outbox(), token)
        assert again.sent == 0
        store = Store.open(ledger_db)
        rep = audit(store)
        assert rep.ok, rep.problems
        assert rep.entries == 5  # ledger key, runner key, three receipts: nothing twice
        data, media = client.fetch_artifact(srv.url, art.artifact.digest["sha256"])
        assert (data, media) == (snap, SNAPSHOT_MEDIA_TYPE)
        out = tmp_path / "snap.pickle"
        r = run(capsys, "artifact", "get", art.artifact.digest["sha256"], "-o", str(out))
        assert r.code == 0, r.err
        assert out.read_bytes() == snap and SNAPSHOT_MEDIA_TYPE in r.out
        store.engine.dispose()
    finally:
        srv.stop()


def test_artifact_upload_is_digest_checked(ledger_db: str, key_dir: Path, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    token = new_token("host", tokens)
    srv = start(ledger_db, KeyDir(key_dir), tokens=tokens)
    try:
        r = httpx.put(
            srv.url + "/v1/artifacts/sha256:" + "ab" * 32,
            content=b"not those bytes",
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 400 and "differs from its digest" in r.json()["error"]
        r = httpx.put(srv.url + "/v1/artifacts/sha256:" + "ab" * 32, content=b"x")
        assert r.status_code == 401
        # Uploaded but named by no receipt: not served.
        client.upload_artifact(srv.url, b"orphan", "text/plain", token)
        with pytest.raises(Exception, match="named by a logged receipt"):
            client.fetch_artifact(srv.url, hashlib.sha256(b"orphan").hexdigest())
    finally:
        srv.stop()


def test_slow_body_is_cut_at_the_deadline(ledger_db: str, key_dir: Path) -> None:
    """One byte every 0.5 s no longer holds the server: the whole request has a deadline."""
    srv = start(ledger_db, KeyDir(key_dir), deadline_s=2)
    host, port = srv.url.removeprefix("http://").split(":")
    try:
        t0 = time.monotonic()
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(b"POST /v1/envelopes HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
            answer = b""
            for _ in range(40):
                try:
                    s.sendall(b"{")
                except OSError:
                    break
                s.settimeout(0.5)
                try:
                    answer += s.recv(4096)
                except TimeoutError:
                    continue
                if answer:
                    break
        assert b" 408 " in answer.split(b"\r\n")[0], answer
        assert time.monotonic() - t0 < 6
        assert client.health(srv.url)["ok"]
    finally:
        srv.stop()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_no_5xx_for_requests_drawn_from_the_openapi_document(ledger_db: str, key_dir: Path) -> None:
    srv = start(ledger_db, KeyDir(key_dir))
    doc = client._get(srv.url, "/openapi.json")
    ops = [(p, m) for p, item in doc["paths"].items() for m in item]
    text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
    junk = st.one_of(
        text,
        st.sampled_from(["sha256:" + "ab" * 32, "ab" * 6, "0", "-1", "99999999999999999999"]),
    )
    bodies = st.one_of(
        st.binary(max_size=200),
        st.recursive(
            st.none() | st.booleans() | st.integers() | text,
            lambda c: st.lists(c, max_size=3) | st.dictionaries(text, c, max_size=3),
            max_leaves=8,
        ).map(lambda v: json.dumps(v).encode()),
    )

    @settings(
        max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None
    )
    @given(
        st.sampled_from(ops),
        junk,
        st.dictionaries(
            st.sampled_from(["repo", "pr", "rev", "from", "to", "artifacts"]), junk, max_size=3
        ),
        bodies,
    )
    def probe(op: tuple[str, str], value: str, query: dict[str, str], body: bytes) -> None:
        path, method = op
        for name in ("{ref}", "{digest}"):
            path = path.replace(name, urllib.parse.quote(value, safe=":") or "x")
        r = httpx.request(
            method.upper(),
            srv.url + path,
            params=query,
            content=body if method in ("post", "put") else None,
            timeout=30,
        )
        assert r.status_code < 500, (method, path, query, body, r.text)
        if r.status_code >= 400:
            assert list(r.json()) == ["error"]

    try:
        probe()
    finally:
        srv.stop()
