"""When a receipt's revocation voids it (rule `receipt-revoked`).

The operator revokes a receipt with a reason (`ledger revoke`, a `revocation`
entry naming the receipt). A pass, an inconclusive or any other receipt is the
operator's to revoke. A counterexample is not: revoking it would lift a failure,
and lifting a failure needs the independent review a supersession of it needs
(`supersession.authority`): a reviewer key other than its signer disputes it,
in a review logged before the revocation, which the revocation names. Without
that review the revocation is pending and the counterexample stands, however
the entry reached the log: the write path refuses it, and the judge checks again.

A reviewer (a token of the `reviewer` role) revokes on its own dispute, which the
revocation names: a counterexample as above; a pass only where the plan says so
(`[review] revoke_pass = "reviewer"`). Under a plan that does not (every plan
written before the setting), a reviewer's revocation of a pass does not count and
says why, and the pass stands: revoking a pass stays the operator's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from ledger.evidence.entry import ReceiptRevocation
from ledger.qualification.evidence import ReceiptEvidence, ReviewEvidence, Revoked, short_id

__all__ = [
    "REVOCATION_PENDING",
    "Revoked",
    "authority",
    "judged",
    "missing_review",
    "needs_review",
    "under_plan",
    "with_revocations",
]

PLAN_KEEPS_PASSES = (
    'the plan lets only the operator revoke a pass; [review] revoke_pass = "reviewer" '
    "lets a reviewer"
)
"""Why a reviewer's revocation of a pass does not count under the plan (`Revoked.refused`)."""

REVOCATION_PENDING = "revocation pending review"
"""The words every surface uses for a counterexample's revocation without its review
(`Revoked.text`)."""


def needs_review(r: ReceiptEvidence) -> bool:
    """A counterexample (signed `failed`): its revocation needs an independent review."""
    return r.predicate.outcome == "failed"


def authority(
    r: ReceiptEvidence,
    review: str | None,
    before: int,
    reviews_of_r: Sequence[ReviewEvidence],
    by: str = "operator",
    signer: str | None = None,
) -> str | None:
    """Who vouches for revoking `r` by a revocation logged at `before` naming `review`,
    on the word of `by` (`operator` or `reviewer`); None when nobody does. A reviewer's
    revocation rests on its dispute whatever `r` is (the plan then decides whether it
    counts for a pass: `under_plan`), and a signed one (`signer`, its key id) on the
    dispute that same key signed: its own."""
    if not needs_review(r) and by != "reviewer":
        return "the ledger's operator"
    for v in reviews_of_r:
        if v.id != review or v.receipt != r.id or v.seq >= before:
            continue
        if by == "reviewer" and signer is not None and v.signer != signer:
            continue
        independent = v.signer != r.signer
        sound = v.problem is None and not v.revoked and v.signer_role == "reviewer"
        if v.verdict == "dispute" and independent and sound:
            return f"review {short_id(v.id)} disputes it"
    return None


def missing_review(r: ReceiptEvidence) -> str:
    """What a counterexample's revocation lacks, with the commands that supply it."""
    rid = short_id(r.id)
    return (
        f"{rid} is a counterexample: revoking it needs an independent review, as a "
        f"supersession of it does: a reviewer key other than its signer disputes it "
        f"(`ledger review {rid} --dispute --note TEXT --key REVIEWER`), then "
        f"`ledger revoke {rid} --reason TEXT --review REVIEW_ID`"
    )


def judged(
    r: ReceiptEvidence, rev: ReceiptRevocation, reviews_of_r: Sequence[ReviewEvidence]
) -> Revoked:
    """The revocation `rev` of `r`, with its authority weighed: none where its
    signature does not count (`ReceiptRevocation.problem`)."""
    who = None
    if rev.problem is None:
        who = authority(r, rev.review, rev.seq, reviews_of_r, rev.by, rev.signer)
    return Revoked(
        rev.seq,
        rev.reason,
        rev.review,
        who,
        rev.by,
        refused=rev.problem,
        unsigned=rev.unsigned,
        signer=rev.signer,
        problem=rev.problem,
    )


def under_plan(receipts: Sequence[ReceiptEvidence], revoke_pass: str) -> list[ReceiptEvidence]:
    """`receipts`, a reviewer's revocation of a pass counted only where the plan's
    `[review] revoke_pass` is `reviewer` (the judge's step: the reader has no plan)."""
    if revoke_pass == "reviewer":
        return list(receipts)
    out = []
    for r in receipts:
        rev = r.revocation
        if rev is not None and rev.by == "reviewer" and not needs_review(r) and not rev.refused:
            r = replace(r, revocation=replace(rev, authority=None, refused=PLAN_KEEPS_PASSES))
        out.append(r)
    return out


def with_revocations(
    receipts: Sequence[ReceiptEvidence],
    reviews: Sequence[ReviewEvidence],
    revoked: Mapping[str, ReceiptRevocation],
) -> list[ReceiptEvidence]:
    """`receipts`, each revoked one carrying its revocation weighed against `reviews`
    (what the reader hands the judge: `Store.revoked_receipts` of the receipts read)."""
    if not revoked:
        return list(receipts)
    out = []
    for r in receipts:
        rev = revoked.get(r.id)
        if rev is not None:
            mine = [v for v in reviews if v.receipt == r.id]
            r = replace(r, revocation=judged(r, rev, mine))
        out.append(r)
    return out
