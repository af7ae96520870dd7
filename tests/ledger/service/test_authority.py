"""Least authority over HTTP: a token does only what its roles name, the ledger key
is out of every token's reach, a key records who registered it, and a removed
token stops working without a restart."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import httpx
import pytest

from ledger.evidence.errors import RefusedError, UsageError
from ledger.evidence.keys import KeyDir, public_pem
from ledger.identity.revision import Revision
from ledger.qualification import evaluate
from ledger.read.evidence import load_evidence
from ledger.remote import client
from ledger.service.auth import new_token, revoke_token
from ledger.service.run import start
from ledger.store.store import Store
from ledger.transparency.audit import audit
from tests.ledger.factories import COMMIT, TREE, envelope
from tests.ledger.helpers import run
from tests.ledger.qualification.helpers import plan
from tests.ledger.service.test_service import ledger_db

__all__ = ["ledger_db"]


def _pem(keys: KeyDir, name: str) -> bytes:
    return public_pem(keys.create(name).public)


def test_a_runner_token_registers_no_key_and_a_keys_token_never_touches_the_ledger_key(
    ledger_db: str, key_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tokens = tmp_path / "tokens"
    gpu = new_token("gpu-host", tokens)  # docs/deploy.md's GPU host: runner only
    admin = new_token("key-desk", tokens, ["keys"])
    keys = KeyDir(key_dir)
    srv = start(ledger_db, keys, tokens=tokens)
    try:
        with pytest.raises(UsageError, match="lacks the 'keys' role"):
            client.register_key(srv.url, "rev", "reviewer", _pem(keys, "rev"), token=gpu)
        with pytest.raises(UsageError, match="lacks the 'keys' role"):
            client.revoke_key(srv.url, "runner", "mine now", keys.load("runner"), token=gpu)
        with pytest.raises(UsageError, match="lacks the 'operator' role"):
            client.sign_checkpoint(srv.url, token=admin)
        with pytest.raises(UsageError, match="lacks the 'operator' role"):
            client.audit(srv.url, token=gpu)
        # The ledger key: never registered, revoked or renamed over HTTP.
        with pytest.raises(RefusedError, match="runner or reviewer"):
            client.register_key(srv.url, "evil", "ledger", _pem(keys, "evil"), token=admin)
        with pytest.raises(RefusedError, match="ledger key"):
            client.revoke_key(srv.url, "ledger", "rotated", keys.load("ledger"), token=admin)
        with pytest.raises(RefusedError, match="name of a ledger key"):
            client.register_key(srv.url, "ledger", "runner", _pem(keys, "x"), token=admin)
        # A name that would act on a terminal is refused, not stored.
        with pytest.raises(RefusedError, match="letters, digits"):
            client.register_key(srv.url, "\x1b[2Jx", "runner", _pem(keys, "y"), token=admin)
        listed = {k["name"]: k for k in client.fetch_keys(srv.url)}
        assert listed["ledger"]["role"] == "ledger" and not listed["ledger"]["revoked"]
    finally:
        srv.stop()
    # The operator's checkpoint and audit still work and say ok.
    assert run(capsys, "log", "checkpoint").code == 0
    store = Store.open(ledger_db)
    assert audit(store).ok
    store.engine.dispose()


def test_a_holders_own_reviewer_key_is_not_an_independent_review(
    ledger_db: str, key_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tokens = tmp_path / "tokens"
    desk = new_token("gpu-host-7", tokens, ["keys"])
    other = new_token("review-desk", tokens, ["keys"])
    keys = KeyDir(key_dir)
    srv = start(ledger_db, keys, tokens=tokens)
    try:
        client.register_key(
            srv.url, "h7", "runner", _pem(keys, "h7"), token=desk, hosts={"gpu-host-7": []}
        )
        client.register_key(srv.url, "h7-rev", "reviewer", _pem(keys, "h7-rev"), token=desk)
        client.register_key(srv.url, "alice", "reviewer", _pem(keys, "alice"), token=other)
        [rec] = client.post_envelopes(srv.url, [envelope(keys.load("h7"))])
    finally:
        srv.stop()
    assert run(capsys, "review", rec["id"], "--concur", "--key", "h7-rev").code == 0
    store = Store.open(ledger_db)
    byname = {k.name: k for k in store.keys().values()}
    assert byname["h7"].registered_by == byname["h7-rev"].registered_by == "gpu-host-7"
    rev = Revision(repo="example", commit=COMMIT, tree=TREE)
    p = plan(name="admission.no-oom-after-admit", check="admission", scope={}, reviews=1)

    def state() -> str:
        receipts, reviews = load_evidence(store, rev)
        rep = evaluate(plan=p, revision=rev, receipts=receipts, reviews=reviews)
        return rep.at_required_scope("admission.no-oom-after-admit").state

    assert state() == "needs-review"
    assert run(capsys, "review", rec["id"], "--concur", "--key", "alice").code == 0
    assert state() == "qualified"
    store.engine.dispose()


def test_a_revoked_token_stops_working_without_a_restart(
    ledger_db: str, key_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tokens = tmp_path / "tokens"
    keys = KeyDir(key_dir)
    r = run(capsys, "token", "new", "desk", "--role", "keys", "--tokens", str(tokens))
    assert r.code == 0, r.err
    token = r.out.strip()
    srv = start(ledger_db, keys, tokens=tokens)
    try:
        client.register_key(srv.url, "a1", "runner", _pem(keys, "a1"), token=token, hosts={"h": []})
        listed = run(capsys, "token", "list", "--tokens", str(tokens))
        assert listed.out.split() == ["desk", "keys"] and token not in tokens.read_text()
        assert run(capsys, "token", "revoke", "desk", "--tokens", str(tokens)).code == 0
        with pytest.raises(UsageError, match="unknown token"):
            client.register_key(
                srv.url, "a2", "runner", _pem(keys, "a2"), token=token, hosts={"h": []}
            )
        # Removing the file altogether also takes effect at once.
        again = new_token("desk2", tokens, ["keys"])
        client.register_key(srv.url, "a3", "runner", _pem(keys, "a3"), token=again, hosts={"h": []})
        tokens.unlink()
        r2 = httpx.post(
            srv.url + "/v1/keys/a3/revoke",
            json={"reason": "x"},
            headers={"Authorization": f"Bearer {again}"},
        )
        assert r2.status_code == 401
    finally:
        srv.stop()


def test_a_world_writable_tokens_file_or_key_folder_is_refused_with_the_chmod(
    ledger_db: str, key_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tokens = tmp_path / "tokens"
    new_token("desk", tokens, ["keys"])
    os.chmod(tokens, 0o666)
    with pytest.raises(UsageError, match=f"chmod o-w {tokens}"):
        start(ledger_db, KeyDir(key_dir), tokens=tokens)
    with pytest.raises(UsageError, match="chmod o-w"):
        revoke_token("desk", tokens)
    os.chmod(key_dir, os.stat(key_dir).st_mode | stat.S_IWOTH)
    r = run(capsys, "attest", "--help")
    assert r.code == 0
    r = run(capsys, "keys", "new", "h9", "--role", "runner")
    assert r.code == 2 and f"chmod o-w {key_dir}" in r.err
