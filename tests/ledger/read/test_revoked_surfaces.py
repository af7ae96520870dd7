"""A revoked receipt on every surface: `status` and `history` (the judge counts it for
nothing, rule `receipt-revoked`), `show`; a counterexample's revocation counts only on
an independent dispute, however it reached the log (real SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest

from ledger.qualification.revocation import REVOCATION_PENDING
from tests.ledger.write.test_revoke import CLAIM, Lg, force_revocation, make_lg


@pytest.fixture
def lg(db_url: str, key_dir: Path, repo: git.Repo, capsys: pytest.CaptureFixture[str]) -> Lg:
    return make_lg(db_url, key_dir, repo, capsys)


def test_a_revoked_pass_counts_for_nothing_and_every_surface_says_why(lg: Lg) -> None:
    rid = lg.attest("passed")
    assert lg.status()["state"] == "qualified"
    r = lg("revoke", rid[:19], "--reason", "ran on a mislabelled host")
    assert r.code == 0, r.err
    assert r.out.startswith(f"revoked {rid} ")
    st = lg.status()
    assert st["state"] != "qualified"
    reasons = " ".join(str(x) for x in st["reasons"])  # type: ignore[attr-defined]
    assert "revoked: ran on a mislabelled host" in reasons
    for words in (("history",), ("status", "--claim", CLAIM)):
        said = lg(*words, "--rev", "HEAD", "--repo", str(lg.repo)).out
        assert "revoked: ran on a mislabelled host" in " ".join(said.split()), said
    shown = lg("show", rid)
    assert "revoked: ran on a mislabelled host" in " ".join(shown.out.split()), shown.out
    shown_json = json.loads(lg("show", rid, "--json").out)
    assert shown_json["revocation"]["reason"] == "ran on a mislabelled host"
    assert shown_json["revocation"]["effective"] is True
    audit = lg("audit")
    assert audit.code == 0, audit.out + audit.err


def test_a_counterexample_revoked_without_its_review_still_stands(lg: Lg) -> None:
    """However a revocation reached the log, the judge weighs its authority again."""
    fid = lg.attest("failed")
    force_revocation(lg.store(), fid, "no review")
    assert lg.status()["state"] == "failed"
    st = lg.status()
    assert st["state"] == "failed"
    assert any(REVOCATION_PENDING in str(x) for x in st["reasons"])  # type: ignore[attr-defined]
    assert REVOCATION_PENDING in " ".join(lg("show", fid).out.split())


def test_a_counterexample_revoked_on_an_independent_dispute_blocks_no_more(lg: Lg) -> None:
    fid = lg.attest("failed")
    did = lg("review", fid, "--dispute", "--note", "host ran out of RAM", "--key", "other")
    assert did.code == 0, did.err
    rid = did.out.split()[0]
    assert lg.status()["state"] == "failed"
    ok = lg("revoke", fid, "--reason", "the host's RAM, not the code", "--review", rid)
    assert ok.code == 0, ok.err
    st = lg.status()
    assert st["state"] != "failed"
    assert any("revoked: the host's RAM" in str(x) for x in st["reasons"])  # type: ignore[attr-defined]


def test_a_servers_evidence_carries_each_revocation_and_the_client_weighs_it() -> None:
    """`POST /v1/evidence` (what a client judges from): each revoked receipt's revocation
    travels with it, and the client weighs its authority against the reviews itself."""
    from ledger.qualification.evidence import ReceiptEvidence, Revoked
    from ledger.read.evidence import Evidence
    from tests.ledger.factories import statement

    def receipt(outcome: str, n: int) -> ReceiptEvidence:
        rid = "sha256:" + f"{n}" * 64
        pending = Revoked(9, "why", None, None)
        return ReceiptEvidence(
            id=rid,
            seq=n,
            statement=statement(outcome=outcome, reason=None if outcome == "passed" else "OOM"),
            signer="k" * 64,
            signer_role="runner",
            revocation=pending,
        )

    sent = Evidence([receipt("passed", 1), receipt("failed", 2)], []).to_json()
    doc = json.loads(json.dumps(sent))
    assert [r["revocation"] for r in doc["receipts"]] == [
        {"seq": 9, "reason": "why", "review": None, "by": "operator", "signer": None,
         "problem": None}
    ] * 2  # fmt: skip
    back = Evidence.from_json(doc)
    revs = [r.revocation for r in back.receipts]
    assert revs[0] is not None and revs[0].effective  # a pass: the operator's
    assert revs[1] is not None and not revs[1].effective  # a counterexample: no review
    # One whose signature the server found not to count voids nothing on the client.
    forged = json.loads(json.dumps(doc))
    forged["receipts"][0]["revocation"].update(signer="k" * 64, problem="forged")
    rev = Evidence.from_json(forged).receipts[0].revocation
    assert rev is not None and not rev.effective and rev.refused == "forged"
    # A reviewer's revocation stays a reviewer's on the client (the plan then decides);
    # a server that says nothing of whose it is speaks of the operator's.
    doc["receipts"][0]["revocation"]["by"] = "reviewer"
    del doc["receipts"][1]["revocation"]["by"]
    back = Evidence.from_json(doc)
    assert [r.revocation.by for r in back.receipts if r.revocation] == ["reviewer", "operator"]
