"""A receipt's revocation as the read side shows it: weighed by the judge's rule
(`ledger.qualification.revocation`) against the receipt's reviews, for `status`,
`history`, `show` and the pages alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ledger.evidence.entry import LoggedEntry
from ledger.evidence.keys import KeyInfo
from ledger.qualification.evidence import ReceiptEvidence, ReviewEvidence
from ledger.qualification.revocation import judged
from ledger.store.store import Store
from ledger.transparency.logged import standing

__all__ = ["revocation_document"]


def _signed(e: LoggedEntry, keys: Mapping[str, KeyInfo]) -> dict[str, Any]:
    info = keys.get(e.signer)
    return {
        "id": e.entry_id,
        "seq": e.seq,
        "signer": e.signer,
        "signer_role": info.role if info else "unknown",
        "signer_revoked_seq": info.revoked_seq if info else None,
        "problem": standing(e, keys),
    }


def revocation_document(store: Store, e: LoggedEntry) -> dict[str, Any] | None:
    """`show --json`'s `revocation`: the receipt's revocation, its reason, the review
    it rests on, whether it counts (`effective`) and the words every surface shows;
    None where the receipt is not revoked."""
    if e.kind != "receipt":
        return None
    rev = store.revoked_receipts([e.entry_id]).get(e.entry_id)
    if rev is None:
        return None
    keys = store.keys()
    r = ReceiptEvidence(statement=e.receipt, **_signed(e, keys))
    reviews = []
    for v in store.review_entries([e.entry_id]):
        p = v.review.predicate
        reviews.append(
            ReviewEvidence(receipt=p.receipt, verdict=p.verdict, note=p.note, **_signed(v, keys))
        )
    j = judged(r, rev, reviews)
    return {
        "seq": j.seq,
        "reason": j.reason,
        "review": j.review,
        "revoked": rev.revoked,
        "authority": j.authority,
        "by": j.by,
        "revoked_by": rev.revoked_by,
        "effective": j.effective,
        "text": j.text(),
    }
