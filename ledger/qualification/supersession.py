"""When a later receipt replaces the ones it names (rule `supersession`).

A supersession is evidence that would count in the same place (same claim,
logged later, sound, decisive, covering the scope) *and* carries authority:
it is signed by the superseded receipt's own signer, or an independent
reviewer concurs with it. Without authority any runner key could erase
another's counterexample by signing a pass that "supersedes" it; so the
counterexample stands and every surface says `SUPERSESSION_PENDING`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ledger.qualification import pass_rules, receipt_rules, rules
from ledger.qualification.evidence import ReceiptEvidence, ReviewEvidence, short_id
from ledger.qualification.reviews import ReviewTally

__all__ = [
    "SUPERSESSION_PENDING",
    "Judgement",
    "authority",
    "judge",
    "pending",
    "problem",
]

SUPERSESSION_PENDING = "supersession pending review"
"""The words every surface uses for a supersession that lacks authority."""


def pending(reason: rules.Reason) -> bool:
    """`reason` says a supersession waits for authority (`SUPERSESSION_PENDING`)."""
    return reason.rule == rules.SUPERSESSION and reason.text.startswith(SUPERSESSION_PENDING)


Effect = Literal["effective", "pending", "ignored"]


@dataclass(frozen=True, slots=True)
class Judgement:
    """What one supersession of `superseded` by `by` does."""

    superseded: str
    by: str
    effect: Effect
    reason: rules.Reason


def problem(s: ReceiptEvidence, r: ReceiptEvidence) -> str | None:
    """Why `s` cannot replace `r` anywhere (carry-over aside), or None."""
    # A supersession replaces evidence only when it is itself evidence that
    # would count in the same place: otherwise anyone could erase a
    # counterexample with a receipt that proves nothing here.
    if s.predicate.claim != r.predicate.claim:
        return f"it is for claim {s.predicate.claim!r}"
    if s.seq <= r.seq:
        return "it was not logged later"
    if receipt_rules.integrity(s) or receipt_rules.dirty(s) is not None:
        return "it does not hold (signature, key, role or dirty tree)"
    outcome = receipt_rules.effective_outcome(s)[0]
    if outcome not in ("passed", "failed"):
        return f"its outcome ({outcome}) decides nothing"
    if not pass_rules.covers_receipt(s, r):
        return "its scope does not cover the superseded receipt's scope"
    return None


def authority(
    s: ReceiptEvidence, r: ReceiptEvidence, reviews_of_s: Sequence[ReviewEvidence]
) -> str | None:
    """Who vouches for `s` replacing `r`: its own signer, or an independent
    reviewer's concurrence with `s`; None when nobody does."""
    if s.signer == r.signer:
        return "signed by the superseded receipt's signer"
    tally = ReviewTally.of(s, reviews_of_s)
    # The superseded receipt's signer cannot review its way out either.
    concur = [v for v in tally.concur if v.signer != r.signer]
    if concur:
        return f"review {short_id(concur[0].id)} concurs"
    return None


def judge(
    r: ReceiptEvidence,
    s: ReceiptEvidence,
    why: str,
    reviews_of_s: Sequence[ReviewEvidence],
    extra_problem: str | None = None,
) -> Judgement:
    """The effect of `s` naming `r` as superseded, with the reason to show."""
    rid, sid = short_id(r.id), short_id(s.id)
    bad = problem(s, r) or extra_problem
    if bad is not None:
        text = f"{sid} names {rid} as superseded, but does not replace it: {bad}"
        return Judgement(r.id, s.id, "ignored", rules.Reason(rules.SUPERSESSION, text, r.id))
    who = authority(s, r, reviews_of_s)
    if who is None:
        text = (
            f"{SUPERSESSION_PENDING}: {sid} (seq {s.seq}) names {rid} as superseded ({why}),"
            f" but is signed by another key; {rid} stands until its signer supersedes it or"
            f" an independent reviewer concurs with {sid}"
        )
        return Judgement(r.id, s.id, "pending", rules.Reason(rules.SUPERSESSION, text, r.id))
    text = f"{rid} superseded by {sid} (seq {s.seq}, {who}): {why}"
    return Judgement(r.id, s.id, "effective", rules.Reason(rules.SUPERSESSION, text, r.id))
