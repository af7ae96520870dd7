"""Who may revoke a pass is the plan's to say (`[review] revoke_pass`): the operator
only (the default, and every plan written before the setting), or a reviewer too, on
its own independent dispute of the pass. A reviewer's revocation of a pass under a plan
that does not let it counts for nothing and says why; a counterexample's revocation
needs the independent dispute whoever logs it."""

from __future__ import annotations

import pytest

from ledger.evidence.entry import ReceiptRevocation
from ledger.evidence.errors import InputError
from ledger.qualification.evidence import ReviewEvidence
from ledger.qualification.judge import judge
from ledger.qualification.plan import parse_plan
from ledger.qualification.revocation import PLAN_KEEPS_PASSES, with_revocations
from ledger.qualification.rules import RECEIPT_REVOKED
from tests.ledger.qualification.test_one_judge import CLAIM, HEAD, PLAN, _gathered, _receipt

TOML = f"""
[[claims]]
name = "{CLAIM}"
check = "admission"
"""


def _dispute(receipt: str, seq: int, signer: str = "reviewer-key") -> ReviewEvidence:
    return ReviewEvidence(
        id="sha256:" + f"{seq:02d}" * 32,
        seq=seq,
        receipt=receipt,
        verdict="dispute",
        note="ran on the wrong host",
        signer=signer,
        signer_role="reviewer",
    )


def _row_reasons(revoke_pass: str, by: str, review: bool = True) -> tuple[str, list[str]]:
    """The claim's state and reasons for a pass revoked at seq 3 by `by`, under a plan
    whose `[review] revoke_pass` is `revoke_pass`."""
    r = _receipt(1, HEAD, "passed")
    v = _dispute(r.id, 2)
    rev = ReceiptRevocation(3, r.id, "mislabelled host", v.id if review else None, None, by)
    receipts = with_revocations([r], [v], {r.id: rev})
    plan = PLAN.model_copy(
        update={"review": PLAN.review.model_copy(update={"revoke_pass": revoke_pass})}
    )
    report = judge(_gathered(receipts, plan=plan, reviews=[v]))
    (row,) = report.claims
    return row.state, [f"{x.rule}: {x.text}" for x in row.reasons]


def test_a_plan_without_the_setting_leaves_revoking_a_pass_to_the_operator() -> None:
    assert parse_plan(TOML).review.revoke_pass == "operator"
    state, reasons = _row_reasons("operator", "reviewer")
    # The pass stands (disputed, not void), and says why the revocation does not count.
    assert state == "disputed", (state, reasons)
    assert any(PLAN_KEEPS_PASSES in x and "stands" in x for x in reasons), reasons
    assert not any("revoked: mislabelled host" in x for x in reasons), reasons
    # The operator's revocation counts as it always did.
    state, reasons = _row_reasons("operator", "operator", review=False)
    assert any("revoked: mislabelled host" in x for x in reasons), reasons


def test_a_plan_that_says_so_lets_a_reviewer_revoke_a_pass_on_its_dispute() -> None:
    plan = parse_plan(TOML + '\n[review]\nrevoke_pass = "reviewer"\n')
    assert plan.review.revoke_pass == "reviewer"
    state, reasons = _row_reasons("reviewer", "reviewer")
    assert state != "qualified"
    assert any(
        x.startswith(f"{RECEIPT_REVOKED}:") and "revoked: mislabelled host" in x for x in reasons
    ), reasons


def test_a_reviewers_revocation_without_an_independent_dispute_counts_for_nothing() -> None:
    r = _receipt(1, HEAD, "passed", signer="key-a")
    own = _dispute(r.id, 2, signer="key-a")  # the pass's own signer
    rev = ReceiptRevocation(3, r.id, "x", own.id, None, "reviewer")
    (weighed,) = with_revocations([r], [own], {r.id: rev})
    assert weighed.revocation is not None and not weighed.revocation.effective


def test_an_unknown_setting_is_refused_in_one_line() -> None:
    with pytest.raises(InputError) as e:
        parse_plan(TOML + '\n[review]\nrevoke_pass = "anyone"\n')
    assert "revoke_pass" in e.value.reason() and "\n" not in e.value.reason()


def test_the_revocations_entry_says_whose_word_it_is() -> None:
    from ledger.evidence.entry import LoggedEntry, receipt_revocation_body

    rid = "sha256:" + "1" * 64
    old = LoggedEntry(5, "revocation", "x", receipt_revocation_body(rid, "r", "t"), None)
    assert old.receipt_revocation().by == "operator"
    body = receipt_revocation_body(rid, "r", "t", "sha256:" + "2" * 64, "reviewer", "ann")
    rev = LoggedEntry(5, "revocation", "x", body, None).receipt_revocation()
    assert (rev.by, rev.revoked_by) == ("reviewer", "ann")
