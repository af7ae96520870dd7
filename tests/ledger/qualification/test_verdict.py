"""The verdict model: the headline, the blockers with the next command, and
what each receipt means for the question asked."""

from __future__ import annotations

from ledger.qualification import evaluate
from ledger.qualification.meanings import verdict_of
from ledger.qualification.plan import ClaimSpec, Plan

from .factories import CHECK, CLAIM, H200, receipt, review, revision
from .helpers import report


def _meanings(rep_receipts: object) -> dict[str, str]:
    v = verdict_of(rep_receipts)  # type: ignore[arg-type]
    return {r.id: r.meaning for c in v.claims for r in c.receipts}


def test_headline_counts_required_claims_and_blockers_come_worst_first() -> None:
    plan = Plan(
        claims=(
            ClaimSpec(name="a.not-run", check=CHECK, scope=dict(H200)),
            ClaimSpec(name="b.ok", check=CHECK, scope=dict(H200)),
            ClaimSpec(name="c.failed", check=CHECK, scope=dict(H200)),
            ClaimSpec(name="d.optional", check=CHECK, scope=dict(H200), required=False),
        )
    )
    log = [
        receipt(seq=1, claim="b.ok"),
        receipt(seq=2, claim="c.failed", outcome="failed", reason="OOM at 4x2048"),
    ]
    rep = evaluate(plan=plan, revision=revision(pr=7), receipts=log, reviews=[])
    v = verdict_of(rep)
    assert (v.required, v.qualified_required, v.qualified) == (3, 1, False)
    assert v.headline == "not qualified: 1 of 3 required claims qualified"
    assert [(b.claim, b.state) for b in v.blockers] == [
        ("c.failed", "failed"),
        ("a.not-run", "not-run"),
    ]
    failed, missing = v.blockers
    sid = log[1].id[7:19]
    assert failed.next is not None and "ledger qualify --pr 7 --claim c.failed" in failed.next
    assert f"ledger supersede {sid}" in failed.next
    assert missing.next == "`ledger qualify --pr 7 --claim a.not-run`"
    assert v.scopes == ("device_kind=cuda,gpu_model=NVIDIA H200",)
    doc = rep.to_json()["verdict"]
    assert doc["headline"] == v.headline and [b["claim"] for b in doc["blockers"]] == [
        "c.failed",
        "a.not-run",
    ]


def test_each_receipt_says_what_it_means_here() -> None:
    ok = receipt(seq=1)
    cpu = receipt(seq=2, scope={"device_kind": "cpu"})
    broken = receipt(seq=3, outcome="infra-error", reason="NVML timed out")
    old = receipt(seq=4, outcome="failed", reason="flaky")
    retire = receipt(seq=5, supersedes=[(old.id, "host fault")])
    rep = report([ok, cpu, broken, old, retire])
    m = _meanings(rep)
    assert m[ok.id] == "counts" and m[retire.id] == "counts"
    assert m[cpu.id] == "does-not-cover"
    assert m[broken.id] == "not-evidence"
    assert m[old.id] == "superseded"
    [claim] = verdict_of(rep).claims
    assert claim.state == "qualified" and claim.next is None
    assert claim.receipts[0].id in (ok.id, retire.id)  # deciding receipts first


def test_counterexample_outweighs_a_pass_and_review_states() -> None:
    ok = receipt(seq=1)
    bad = receipt(seq=2, outcome="failed", reason="OOM")
    m = _meanings(report([ok, bad]))
    assert (m[bad.id], m[ok.id]) == ("counterexample", "outweighed")
    wait = receipt(seq=3)
    v = verdict_of(report([wait], reviews=1))
    assert v.claims[0].receipts[0].meaning == "needs-review"
    assert v.claims[0].next is not None and "ledger review" in v.claims[0].next
    disputed = receipt(seq=4)
    rep = report([disputed], [review(disputed, seq=5, verdict="dispute", note="wrong GPU")])
    assert _meanings(rep)[disputed.id] == "disputed"


def test_stale_evidence_on_an_earlier_head() -> None:
    old = receipt(seq=1, commit="v1", pr=7)
    rep = report([old], rev=revision("v2", pr=7))
    v = verdict_of(rep)
    assert v.claims[0].state == "stale" and v.claims[0].receipts[0].meaning == "stale"
    assert v.claims[0].next == f"`ledger qualify --pr 7 --claim {CLAIM}`"


def test_a_supersession_without_authority_is_pending_on_the_receipt() -> None:
    fail = receipt(seq=1, outcome="failed", signer="runner-a")
    flaky = receipt(seq=2, signer="runner-b", supersedes=[(fail.id, "flaky host")])
    v = verdict_of(report([fail, flaky]))
    [claim] = v.claims
    assert claim.state == "failed"
    m = {r.id: r for r in claim.receipts}
    assert m[fail.id].meaning == "supersession-pending"
    assert m[fail.id].to_json()["meaning_text"].startswith("supersession pending review")
    sid = flaky.id[7:19]
    assert claim.next is not None and f"ledger review {sid} --concur" in claim.next
    # Signed by the failure's own signer, it takes effect.
    own = receipt(seq=3, signer="runner-a", supersedes=[(fail.id, "flaky host")])
    v = verdict_of(report([fail, own]))
    assert v.claims[0].state == "qualified"
    assert {r.id: r.meaning for r in v.claims[0].receipts}[fail.id] == "superseded"
