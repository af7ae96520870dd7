"""`ledger revoke ID --reason TEXT [--review ID]`: one receipt void from its
revocation on, on every surface; a counterexample only on an independent
reviewer's dispute (as its supersession needs), so revoking is never a way
around that rule; anything refused writes nothing (real SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest

from ledger.evidence.keys import KeyDir
from ledger.store.store import Store, resolve_url
from ledger.write.ingest import register_key
from tests.ledger.helpers import Run, run

CLAIM = "admission.no-oom-after-admit"


class Lg:
    """A ledger with a runner and a reviewer key, and the repository it speaks of."""

    def __init__(self, db: str, keys: Path, repo: Path, capsys: pytest.CaptureFixture[str]):
        self.db, self.keys, self.repo, self.capsys = db, keys, repo, capsys

    def __call__(self, *args: str) -> Run:
        return run(self.capsys, *args, "--db", self.db)

    def store(self) -> Store:
        return Store.open(resolve_url(self.db))

    def attest(self, outcome: str) -> str:
        why = () if outcome == "passed" else ("--reason", "OOM at step 3")
        cleanup = self.keys.parent / "cleanup.json"
        cleanup.write_text('{"complete": true, "resources": []}')
        r = self(
            "attest", "--unplanned", "--claim", CLAIM, "--rev", "HEAD",
            "--repo", str(self.repo), "--outcome", outcome, *why,
            "--scope", "device_kind=cpu", "--key", "runner", "--cleanup", str(cleanup),
        )  # fmt: skip
        assert r.code == 0, r.err
        return r.out.strip()

    def status(self) -> dict[str, object]:
        r = self("status", "--rev", "HEAD", "--repo", str(self.repo), "--claim", CLAIM, "--json")
        claims = json.loads(r.out)["claims"]
        assert isinstance(claims, list)
        return dict(claims[0])

    def size(self) -> int:
        return self.store().size()


def make_lg(db_url: str, key_dir: Path, repo: git.Repo, capsys: pytest.CaptureFixture[str]) -> Lg:
    """A fresh ledger with keys `runner` and, for reviews, `reviewer` and `other`."""
    assert run(capsys, "init", "--db", db_url).code == 0
    store = Store.open(resolve_url(db_url))
    kd = KeyDir(key_dir)
    for name, role in (("runner", "runner"), ("reviewer", "reviewer"), ("other", "reviewer")):
        register_key(store, name, role, kd.create(name).public)  # type: ignore[arg-type]
    return Lg(db_url, key_dir, Path(repo.working_tree_dir or "."), capsys)


def force_revocation(store: Store, rid: str, reason: str) -> None:
    """A revocation of `rid` naming no review, written behind the write path's back
    (as a ledger that skipped its checks would): what the judge must weigh again."""
    from sqlalchemy import Connection

    from ledger.evidence.canonical import receipt_id
    from ledger.evidence.entry import receipt_revocation_body
    from ledger.store.store import RECEIPT_REVOCATION

    body = receipt_revocation_body(rid, reason, "2026-12-07T00:00:00Z")

    def index(conn: Connection, seq: int) -> None:
        conn.execute(RECEIPT_REVOCATION.insert().values(seq=seq, receipt_id=rid, reason=reason))

    with store.append_tx() as tx:
        tx.add(kind="revocation", entry_id=receipt_id(body), body=body, index=index)


@pytest.fixture
def lg(db_url: str, key_dir: Path, repo: git.Repo, capsys: pytest.CaptureFixture[str]) -> Lg:
    return make_lg(db_url, key_dir, repo, capsys)


def test_revoking_a_counterexample_needs_an_independent_dispute(lg: Lg) -> None:
    fid = lg.attest("failed")
    before = lg.size()
    bare = lg("revoke", fid, "--reason", "flaky host")
    assert bare.code == 1
    assert "needs an independent review" in bare.err and bare.err.count("\n") == 1
    assert lg.size() == before
    concur = lg("review", fid, "--concur", "--note", "it did OOM", "--key", "reviewer")
    assert concur.code == 0, concur.err
    cid = concur.out.split()[0]
    before = lg.size()
    by_concur = lg("revoke", fid, "--reason", "flaky host", "--review", cid)
    assert by_concur.code == 1 and "not an independent dispute" in by_concur.err
    assert lg.size() == before
    assert lg.status()["state"] == "failed"
    dispute = lg("review", fid, "--dispute", "--note", "host ran out of RAM", "--key", "other")
    assert dispute.code == 0, dispute.err
    did = dispute.out.split()[0]
    ok = lg("revoke", fid, "--reason", "the host's RAM, not the code", "--review", did)
    assert ok.code == 0, ok.err
    assert lg.size() == before + 2  # the dispute and the revocation
    assert lg("audit").code == 0


def test_revoke_refuses_what_it_cannot_revoke_and_writes_nothing(lg: Lg) -> None:
    rid = lg.attest("passed")
    review = lg("review", rid, "--concur", "--note", "fine", "--key", "reviewer").out.split()[0]
    before = lg.size()
    assert lg("revoke", rid, "--reason", " ").code == 2
    not_a_receipt = lg("revoke", review, "--reason", "x")
    assert not_a_receipt.code == 1 and "only receipts are revoked" in not_a_receipt.err
    assert lg("revoke", "sha256:" + "0" * 64, "--reason", "x").code == 1
    assert lg.size() == before
    assert lg("revoke", rid, "--reason", "first").code == 0
    again = lg("revoke", rid, "--reason", "second")
    assert again.code == 1 and "already revoked" in again.err
    assert lg.size() == before + 1


def test_the_audit_names_a_revocation_its_row_or_its_receipt_disagrees_with(lg: Lg) -> None:
    """Each receipt revocation is re-derived: its index row from its body, and the
    receipt it names must be logged before it."""
    from sqlalchemy import Connection

    from ledger.evidence.canonical import receipt_id
    from ledger.evidence.entry import receipt_revocation_body
    from ledger.store.store import RECEIPT_REVOCATION

    rid = lg.attest("passed")
    store = lg.store()
    nowhere = "sha256:" + "0" * 64
    for named, row_reason in ((rid, "another reason"), (nowhere, "gone")):
        body = receipt_revocation_body(named, "gone", "2026-12-07T00:00:00Z")

        def index(conn: Connection, seq: int, named: str = named, why: str = row_reason) -> None:
            conn.execute(RECEIPT_REVOCATION.insert().values(seq=seq, receipt_id=named, reason=why))

        with store.append_tx() as tx:
            tx.add(kind="revocation", entry_id=receipt_id(body), body=body, index=index)
    audit = lg("audit")
    assert audit.code == 1
    assert "receipt revocation row differs from the entry" in audit.out
    assert "which is no receipt logged before it" in audit.out
