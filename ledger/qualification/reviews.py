"""Which reviews of a receipt count: each independent reviewer key's latest
valid verdict (rules `reviews`, `dispute`, `signature`, `key-revoked`,
`signer-role`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ledger.qualification.evidence import ReceiptEvidence, ReviewEvidence, short_id
from ledger.qualification.rules import KEY_REVOKED, REVIEWS, SIGNATURE, SIGNER_ROLE, Reason

__all__ = ["ReviewTally", "independent"]


@dataclass(frozen=True, slots=True)
class ReviewTally:
    """The reviews of one receipt that count, by independent reviewer key."""

    concur: tuple[ReviewEvidence, ...]
    dispute: tuple[ReviewEvidence, ...]
    ignored: tuple[Reason, ...]

    @classmethod
    def of(cls, receipt: ReceiptEvidence, reviews: Sequence[ReviewEvidence]) -> ReviewTally:
        """Each reviewer key's latest valid review of `receipt` is its verdict."""
        ignored: list[Reason] = []
        latest: dict[str, ReviewEvidence] = {}
        for v in sorted(reviews, key=lambda v: v.seq):
            if v.receipt != receipt.id:
                continue
            problem = _review_problem(v, receipt)
            if problem is not None:
                ignored.append(problem)
                continue
            latest[v.signer] = v
        concur = tuple(v for v in latest.values() if v.verdict == "concur")
        dispute = tuple(v for v in latest.values() if v.verdict == "dispute")
        return cls(concur, dispute, tuple(ignored))


def _review_problem(v: ReviewEvidence, receipt: ReceiptEvidence) -> Reason | None:
    vid, rid = short_id(v.id), short_id(receipt.id)
    if v.problem:
        return Reason(SIGNATURE, f"review {vid} of {rid} does not count: {v.problem}", receipt.id)
    if v.revoked:
        return Reason(
            KEY_REVOKED,
            f"review {vid} of {rid} was logged at seq {v.seq}, after key {v.signer[:12]} was "
            f"revoked at seq {v.signer_revoked_seq}",
            receipt.id,
        )
    if v.signer_role != "reviewer":
        return Reason(
            SIGNER_ROLE,
            f"review {vid} of {rid} is signed by a {v.signer_role!r} key, not a reviewer key",
            receipt.id,
        )
    if v.signer == receipt.signer:
        return Reason(
            REVIEWS,
            f"review {vid} of {rid} is by the receipt's own signer: not independent",
            receipt.id,
        )
    if not independent(v, receipt):
        return Reason(
            REVIEWS,
            f"review {vid} of {rid} is by a key registered by {v.signer_registered_by}, who "
            "also registered the receipt's key: not independent",
            receipt.id,
        )
    return None


def independent(v: ReviewEvidence, receipt: ReceiptEvidence) -> bool:
    """Not the receipt's signer, and not a key registered by the holder who
    registered the receipt's key (one token holder cannot vouch for itself)."""
    if v.signer == receipt.signer:
        return False
    by = v.signer_registered_by
    return by is None or by != receipt.signer_registered_by
