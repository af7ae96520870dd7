"""A revocation is an authority's assertion, counted only as exactly signed: a receipt's
by the operator's ledger key (or the reviewer key of its own dispute), a key's by a
ledger key or the key itself. One written straight into the database, unsigned or
signed by a key that may not assert it, voids nothing on any surface (status, show,
verify, a bundle, the client that checks the server) and the audit names it; one of an
earlier release's unsigned form keeps its meaning, said to be unsigned (real SQLite and
PostgreSQL)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import git
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import Connection

from ledger.evidence.canonical import receipt_id
from ledger.evidence.entry import receipt_revocation_body, revocation_body
from ledger.evidence.keys import KeyDir, LocalKey
from ledger.evidence.signed_revocation import UNSIGNED, sign_revocation, signed_body
from ledger.store.store import RECEIPT_REVOCATION, REVOCATION, Store
from tests.ledger.helpers import run
from tests.ledger.write.test_revoke import CLAIM, Lg, force_revocation, make_lg

CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "0.2.0"


@pytest.fixture
def lg(db_url: str, key_dir: Path, repo: git.Repo, capsys: pytest.CaptureFixture[str]) -> Lg:
    return make_lg(db_url, key_dir, repo, capsys)


def _insert(store: Store, body: bytes, rid: str | None = None, keyid: str | None = None) -> int:
    """A revocation entry and its index row written behind the write path's back."""

    def index(conn: Connection, seq: int) -> None:
        if rid is not None:
            conn.execute(RECEIPT_REVOCATION.insert().values(seq=seq, receipt_id=rid, reason="x"))
        else:
            conn.execute(REVOCATION.insert().values(seq=seq, keyid=keyid, reason="x"))

    with store.append_tx() as tx:
        return tx.add(kind="revocation", entry_id=receipt_id(body), body=body, index=index)


def _forged(rid: str, key: LocalKey | None, how: str = "") -> bytes:
    """A new-form revocation of `rid` with reason `x`: signed by `key`, with its
    signature emptied (`how="bare"`) or its payload changed after signing (`"swapped"`)."""
    doc = receipt_revocation_body(rid, "x", "2026-12-07T00:00:00Z")
    signer = key or LocalKey("nobody", Ed25519PrivateKey.generate())
    env = sign_revocation(doc, signer)
    if how == "bare":
        env["signatures"] = []
    elif how == "swapped":
        other = receipt_revocation_body(rid, "x", "2026-12-08T00:00:00Z")
        env["payload"] = base64.b64encode(other).decode()
    return signed_body(env)


def test_a_revocation_is_logged_signed_by_the_operators_ledger_key(lg: Lg) -> None:
    rid = lg.attest("passed")
    assert lg("revoke", rid, "--reason", "ran on a mislabelled host").code == 0
    store = lg.store()
    [last] = store.entries_at([store.size() - 1])
    doc = json.loads(last.body)
    assert set(doc) == {"kind", "signed"}
    ledger = KeyDir(lg.keys).load("ledger")
    assert doc["signed"]["signatures"][0]["keyid"] == ledger.keyid
    shown = json.loads(lg("show", rid, "--json").out)["revocation"]
    assert shown["effective"] and shown["signature"].startswith(f"signed by {ledger.keyid[:12]}")
    # A runner key is no authority over a receipt's revocation: refused, nothing written.
    before = lg.size()
    other = lg.attest("passed")
    refused = lg("revoke", other, "--reason", "x", "--key", "runner")
    assert refused.code == 1 and "only a ledger key" in refused.err, refused.err
    assert lg.size() == before + 1
    assert lg("audit").code == 0


@pytest.mark.parametrize("how", ["runner", "unknown", "bare", "swapped"])
def test_a_forged_revocation_in_the_database_voids_nothing_anywhere(lg: Lg, how: str) -> None:
    rid = lg.attest("passed")
    kd = KeyDir(lg.keys)
    key = {"runner": kd.load("runner"), "unknown": None}.get(how, kd.load("ledger"))
    _insert(lg.store(), _forged(rid, key, how if how in ("bare", "swapped") else ""), rid=rid)
    assert lg.status()["state"] == "qualified"
    reasons = " ".join(map(str, lg.status()["reasons"]))
    assert "revoked: x" not in reasons
    shown = json.loads(lg("show", rid, "--json").out).get("revocation")
    if how == "bare":  # no signature to read: no revocation at all (the audit names it)
        assert shown is None
    else:
        assert shown["effective"] is False and shown["signature"].startswith("not counted: ")
        assert "revocation not counted (" in shown["text"]
    assert lg("verify", rid).code == 0
    audit = lg("audit")
    assert audit.code == 1 and "a revocation that counts for nothing" in audit.out
    # Neither does it hide the operator's own revocation after it.
    ok = lg("revoke", rid, "--reason", "ran on a mislabelled host")
    assert ok.code == 0, ok.err
    assert "revoked: ran on a mislabelled host" in " ".join(map(str, lg.status()["reasons"]))


def test_a_forged_key_revocation_leaves_the_key_standing(lg: Lg) -> None:
    rid = lg.attest("passed")
    kd = KeyDir(lg.keys)
    runner = kd.load("runner")
    # The reviewer key is neither a ledger key nor the runner key itself.
    doc = revocation_body(runner.keyid, "stolen", "2026-12-07T00:00:00Z")
    _insert(lg.store(), signed_body(sign_revocation(doc, kd.load("reviewer"))), keyid=runner.keyid)
    listed = {k["name"]: k for k in json.loads(lg("keys", "list", "--json").out)}
    assert listed["runner"]["revoked"] is False
    assert lg.attest("passed") and lg.status()["state"] == "qualified"
    # The key's own signature retires it: its later receipts count for nothing.
    assert lg("keys", "revoke", "runner", "--reason", "host retired", "--key", "runner").code == 0
    listed = {k["name"]: k for k in json.loads(lg("keys", "list", "--json").out)}
    assert listed["runner"]["revoked"] is True
    assert lg("verify", rid).code == 0  # logged before the revocation: it stands


def test_an_earlier_releases_unsigned_revocation_counts_and_says_so(
    lg: Lg, capsys: pytest.CaptureFixture[str]
) -> None:
    rid = lg.attest("passed")
    force_revocation(lg.store(), rid, "the host's clock was wrong")
    reasons = " ".join(map(str, lg.status()["reasons"]))
    assert f"revoked: the host's clock was wrong; {UNSIGNED}" in reasons
    shown = json.loads(lg("show", rid, "--json").out)["revocation"]
    assert shown["effective"] is True and shown["signature"] == UNSIGNED
    # The 0.2.0 bundle of a revoked receipt: refused as before, and said to be unsigned.
    r = run(
        capsys, "verify", str(CORPUS / "bundle-revoked.json"),
        "--trust", str(CORPUS / "ledger.pub.pem"),
    )  # fmt: skip
    assert r.code == 1 and "revoked: the host's clock was wrong" in r.err
    assert UNSIGNED in r.out, r.out


def test_a_bundle_carrying_a_forged_revocation_verifies(lg: Lg, tmp_path: Path) -> None:
    rid = lg.attest("passed")
    kd = KeyDir(lg.keys)
    _insert(lg.store(), _forged(rid, kd.load("runner")), rid=rid)
    out = tmp_path / "bundle.json"
    assert lg("export", rid, "-o", str(out)).code == 0
    assert "revocations" in json.loads(out.read_text())
    pem = tmp_path / "ledger.pem"
    pem.write_text(lg("keys", "export", "ledger").out)
    r = run(lg.capsys, "verify", str(out), "--trust", str(pem))
    assert r.code == 0, r.err
    assert "does not count" in r.out, r.out


def test_status_claim_is_the_same_through_the_checked_client(
    lg: Lg, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client that checks the server reads the forged revocation from the log it
    holds, and counts it for nothing too."""
    from ledger.service.run import start

    rid = lg.attest("passed")
    _insert(lg.store(), _forged(rid, KeyDir(lg.keys).load("runner")), rid=rid)
    assert lg("log", "checkpoint").code == 0
    pem = tmp_path / "ledger.pem"
    pem.write_text(lg("keys", "export", "ledger").out)
    monkeypatch.setenv("LEDGER_CACHE", str(tmp_path / "cache"))
    srv = start(lg.db, KeyDir(lg.keys))
    try:
        r = run(
            lg.capsys, "status", "--rev", "HEAD", "--repo", str(lg.repo), "--claim", CLAIM,
            "--json", "--server", srv.url, "--trust", str(pem),
        )  # fmt: skip
    finally:
        srv.stop()
    assert r.code == 0, r.err
    assert json.loads(r.out)["claims"][0]["state"] == "qualified"
