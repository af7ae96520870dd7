"""`ledger verify` says what it established, fact by fact, with "as of": the signature
and the signer's role at signing, inclusion up to a checkpoint, the witness quorum,
the key's and the receipt's revocation status as of the key registry it was given,
with its freshness. It passes only when every fact required is established; a
revoked key's receipt with a backdated time never passes (real SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger.evidence.canonical import receipt_id
from ledger.evidence.entry import envelope_body
from ledger.evidence.keys import KeyDir, LocalKey
from ledger.evidence.verification import VerificationReportDoc
from ledger.store.store import Store, resolve_url
from ledger.write.ingest import register_key, revoke_key
from ledger.write.revoke import revoke_receipt
from tests.ledger.factories import dump, envelope
from tests.ledger.helpers import Run, run
from tests.ledger.write.test_revoke import force_revocation

ROOT = Path(__file__).resolve().parents[3]
CORPUS = ROOT / "tests" / "corpus" / "2026-12-03"


class Lg:
    """A ledger with a runner and a reviewer key; the ledger key exported as a PEM."""

    def __init__(self, db: str, tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.db, self.tmp, self.capsys, self.n = db, tmp, capsys, 0
        self.store = Store.open(resolve_url(db))
        self.pem = tmp / "ledger.pem"

    def __call__(self, *args: str) -> Run:
        return run(self.capsys, *args, "--db", self.db)

    def key(self, name: str) -> LocalKey:
        return KeyDir(self.tmp / "keys").load(name)

    def record(self, name: str = "runner", **over: Any) -> str:
        self.n += 1
        f = self.tmp / f"env-{self.n}.json"
        f.write_bytes(envelope(self.key(name), claim=f"claim.{self.n}", **over))
        r = self("record", str(f))
        assert r.code == 0, r.err
        return r.out.split()[0]

    def export(self, rid: str, name: str) -> Path:
        out = self.tmp / name
        r = self("export", rid, "-o", str(out))
        assert r.code == 0, r.err
        return out

    def verify(self, bundle: Path, *more: str) -> tuple[Run, dict[str, Any]]:
        """`verify BUNDLE --trust LEDGER --json`: the run and its document, held to the
        model its checked-in schema is generated from (schemas/verification-report)."""
        r = run(self.capsys, "verify", str(bundle), "--trust", str(self.pem), *more, "--json")
        doc = json.loads(r.out)
        if "facts" in doc:
            VerificationReportDoc.model_validate(doc, strict=True)
        return r, doc

    def newer(self, bundle: Path) -> Path:
        """A newer checkpoint of this ledger, with its consistency proof from the bundle's."""
        note = self.tmp / "bundle.cp"
        note.write_text(json.loads(bundle.read_text())["checkpoint"])
        assert self("log", "checkpoint").code == 0
        r = self("log", "consistency", "--from", str(note), "--json")
        assert r.code == 0, r.err
        out = self.tmp / "newer.json"
        out.write_text(r.out)
        return out


@pytest.fixture
def lg(db_url: str, key_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Lg:
    assert run(capsys, "init", "--db", db_url).code == 0
    out = Lg(db_url, tmp_path, capsys)
    kd = KeyDir(key_dir)
    register_key(out.store, "runner", "runner", kd.create("runner").public)
    register_key(out.store, "reviewer", "reviewer", kd.create("reviewer").public)
    out.pem.write_text(run(capsys, "keys", "export", "ledger", "--db", db_url).out)
    return out


def test_a_bundle_states_each_fact_and_what_it_holds_as_of(lg: Lg) -> None:
    rid = lg.record()
    bundle = lg.export(rid, "b.json")
    r, doc = lg.verify(bundle)
    assert r.code == 0, r.err
    facts = doc["facts"]
    size = doc["checkpoint"]["size"]
    assert facts["signature"]["role_at_signing"] == "runner"
    assert facts["signature"]["registered_at"] < doc["log"]["index"]
    assert facts["inclusion"]["checkpoint"]["size"] == size
    assert facts["witnesses"] == {
        "established": False,
        "required": False,
        "text": "witnesses: not checked (no --policy names a quorum)",
        "quorum": None,
    }
    assert facts["key_status"]["status"] == "active"
    assert facts["key_status"]["freshness"] == "unknown"
    assert facts["key_status"]["as_of"] == size
    assert facts["revocation"]["status"] == "not revoked"
    assert doc["verified"] is True
    text = run(lg.capsys, "verify", str(bundle), "--trust", str(lg.pem))
    assert f"established: key status: active as of checkpoint {size}" in text.out
    assert "NOT established: witnesses: not checked" in text.out


def test_a_newer_checkpoint_leaves_the_status_after_the_bundles_unknown(lg: Lg) -> None:
    rid = lg.record()
    bundle = lg.export(rid, "b.json")
    size = json.loads(bundle.read_text())["checkpoint"].split("\n")[1]
    lg.record()  # the log grows: a revocation could be in it, unseen
    newer = lg.newer(bundle)
    r, doc = lg.verify(bundle, "--checkpoint", str(newer))
    assert r.code == 1
    assert r.err.count("\n") == 1, r.err
    assert f"key status: unknown after checkpoint {size}" in r.err
    assert doc["verified"] is False
    assert doc["facts"]["key_status"]["freshness"] == "stale"
    assert doc["log_consistency"].startswith("consistent with the trusted checkpoint")
    # Exported again, against the newer checkpoint: fresh, and it passes.
    again = lg.export(rid, "b2.json")
    r, doc = lg.verify(again, "--checkpoint", str(lg.newer(again)), "--fresh")
    assert r.code == 0, r.err
    assert doc["facts"]["key_status"]["freshness"] == "fresh"


def test_fresh_requires_the_newest_checkpoint(lg: Lg) -> None:
    bundle = lg.export(lg.record(), "b.json")
    r, doc = lg.verify(bundle, "--fresh")
    assert r.code == 1 and "key status: unknown after checkpoint" in r.err
    assert doc["facts"]["key_status"]["required"] is True


def test_a_revoked_keys_receipt_with_a_backdated_time_never_passes(lg: Lg) -> None:
    early = lg.record()
    revoke_key(lg.store, "runner", "key leaked")
    before = dump(lg.store)
    # Signed after the revocation, dated before it: refused at ingest, nothing written.
    backdated = {"runner": {"started": "2020-01-01T00:00:00Z", "finished": "2020-01-01T00:00:01Z",
                            "ledger_version": "0.1.0"}}  # fmt: skip
    f = lg.tmp / "late.json"
    f.write_bytes(envelope(lg.key("runner"), claim="claim.late", **backdated))
    r = lg("record", str(f))
    assert r.code == 1 and "revoked" in r.err
    assert dump(lg.store) == before
    # A ledger that logged it anyway (written behind ingest's back): its bundle carries
    # the key's revocation, so no verifier takes the receipt's own time for it.
    raw = f.read_bytes()
    from ledger.evidence import dsse

    env = dsse.parse_envelope(raw)
    body = envelope_body(env)
    with lg.store.append_tx() as tx:
        tx.add(kind="receipt", entry_id=receipt_id(dsse.decode_payload(env)), body=body)
    late = receipt_id(dsse.decode_payload(env))
    r, doc = lg.verify(lg.export(late, "late.json"))
    assert r.code == 1
    assert "was revoked" in doc["reason"] and "before entry" in doc["reason"], doc
    # Logged before the revocation: it counts, and the report says the key was revoked after.
    r, doc = lg.verify(lg.export(early, "early.json"))
    assert r.code == 0, r.err
    assert doc["facts"]["key_status"]["status"] == "revoked"
    assert "after entry" in doc["facts"]["key_status"]["text"]


def test_a_revoked_receipt_is_refused_from_the_checkpoint_that_holds_its_revocation(
    lg: Lg,
) -> None:
    rid = lg.record()
    old = lg.export(rid, "old.json")
    revoke_receipt(lg.store, rid, "ran on a mislabelled host")
    new = lg.export(rid, "new.json")
    assert "revocations" in json.loads(new.read_text())
    r, doc = lg.verify(new)
    assert r.code == 1
    assert "revoked: ran on a mislabelled host" in r.err
    assert doc["facts"]["revocation"]["status"] == "revoked"
    # With --fresh and nothing newer held: still revoked, as of what it holds.
    r, doc = lg.verify(new, "--fresh")
    assert r.code == 1 and "revoked: ran on a mislabelled host" in r.err
    # The bundle from before, with a checkpoint at or after the revocation: unknown.
    r, doc = lg.verify(old, "--checkpoint", str(lg.newer(old)))
    assert r.code == 1 and "revocation status: unknown after checkpoint" in r.err
    # In the ledger itself: refused too.
    r = lg("verify", rid)
    assert r.code == 1 and "revoked: ran on a mislabelled host" in r.err
    # Nothing but the revocation was needed: the bundle without it still verifies as before.
    r, _ = lg.verify(old)
    assert r.code == 0, r.err


def test_a_counterexamples_revocation_without_its_review_leaves_it_standing(lg: Lg) -> None:
    """A bundle whose revocation of a failed receipt names no independent dispute: the
    counterexample stands (pending review), as the judge has it."""
    fid = lg.record(outcome="failed", reason="OOM at step 3")
    force_revocation(lg.store, fid, "no review")
    r, doc = lg.verify(lg.export(fid, "f.json"))
    assert r.code == 0, r.err
    assert doc["facts"]["revocation"]["status"] == "pending"


def test_the_witness_quorum_is_named_with_the_time_it_cosigned(
    capsys: pytest.CaptureFixture[str],
) -> None:
    r = run(
        capsys, "verify", str(CORPUS / "bundle.json"), "--policy", str(CORPUS / "policy.txt"),
        "--json",
    )  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    VerificationReportDoc.model_validate(doc, strict=True)
    assert doc["facts"]["witnesses"]["quorum"] == ["w1", "w2"]
    assert doc["facts"]["witnesses"]["required"] is True
    assert doc["checkpoint"]["time_from"] == "witnesses"
    assert doc["checkpoint"]["time"]
