"""A receipt's revocation as the read side shows it: weighed by the judge's rule
(`ledger.qualification.revocation`) against the receipt's reviews and, where the plan
has a say (a reviewer's revocation of a pass), by the governing plan of the receipt's
revision as `status` finds it without a checkout (`read/subject.py`), for `show`, the
receipt page and `GET /v1/entries/ID` alike, so none calls void a pass `status` counts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ledger.evidence.entry import LoggedEntry, ReceiptRevocation
from ledger.evidence.errors import Error
from ledger.evidence.keys import KeyInfo
from ledger.evidence.signed_revocation import UNSIGNED
from ledger.qualification.evidence import ReceiptEvidence, ReviewEvidence
from ledger.qualification.plan import Plan
from ledger.qualification.revocation import judged, needs_review, under_plan
from ledger.store.store import Store
from ledger.transparency.logged import standing

__all__ = ["NOT_WEIGHED", "revocation_document", "void_receipts"]

NOT_WEIGHED = "not weighed: no governing plan"
"""A reviewer's revocation of a pass where no governing plan is found: shown as the log
records it, and said to be so."""


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


def _governing(store: Store, r: ReceiptEvidence, mirrors: Sequence[Path]) -> Plan | None:
    """The plan `status` judges the receipt's revision by, asked as the receipt page asks
    it (its PR, else its commit); None where none is found or the question fails."""
    from ledger.read.subject import identity_from_log

    src = r.predicate.source
    try:
        return identity_from_log(
            store, src.repo, src.pr, None if src.pr is not None else src.commit, mirrors
        ).plan
    except Error:
        return None


def revocation_document(
    store: Store, e: LoggedEntry, mirrors: Sequence[Path] = (), plan: Plan | None = None
) -> dict[str, Any] | None:
    """`show --json`'s `revocation`: the receipt's revocation, its reason, the review
    it rests on, whether it counts (`effective`), why the plan does not let it
    (`refused`), how it was weighed (`weighed`) and the words every surface shows;
    None where the receipt is not revoked. `plan`: the governing plan where the
    caller proved it (a checkout's), else it is looked for as `status` looks without
    a checkout, in `mirrors` (the server's checkouts) where given."""
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
    weighed = "by the judge's rule (the plan has no say in it)"
    if rev.by == "reviewer" and not needs_review(r):
        # Only a reviewer's revocation of a pass is the plan's to weigh; the plan is
        # looked for only then (a question of the log and, on a server, its checkouts).
        plan = plan or _governing(store, r, mirrors)
        if plan is None:
            weighed = NOT_WEIGHED
        else:
            who = plan.review.revoke_pass
            (r,) = under_plan([replace(r, revocation=j)], who)
            j = r.revocation or j
            weighed = f'by the governing plan ([review] revoke_pass = "{who}")'
    return {
        "seq": j.seq,
        "reason": j.reason,
        "review": j.review,
        "revoked": rev.revoked,
        "authority": j.authority,
        "by": j.by,
        "revoked_by": rev.revoked_by,
        "effective": j.effective,
        "refused": j.refused,
        "weighed": weighed,
        "signature": _signature(rev, keys),
        "signer": rev.signer,
        "problem": rev.problem,
        "text": j.text(),
    }


def _signature(rev: ReceiptRevocation, keys: Mapping[str, KeyInfo]) -> str:
    """Whose signature the revocation carries, as `evidence/signed_revocation.py` checked
    it: its signer, `UNSIGNED` (an earlier release's), or why it counts for nothing."""
    if rev.unsigned:
        return UNSIGNED
    if rev.problem is not None or rev.signer is None:
        return f"not counted: {rev.problem}"
    k = keys.get(rev.signer)
    name = f"{k.name}, a {k.role} key" if k is not None else "an unknown key"
    return f"signed by {rev.signer[:12]} ({name})"


def void_receipts(
    store: Store, ids: Sequence[str], mirrors: Sequence[Path] = (), plan: Plan | None = None
) -> dict[str, str]:
    """Of the receipts `ids`, those whose revocation voids them, weighed as `show` weighs
    it (the words it shows, `not weighed` said where no plan was found): one lookup for
    all, and a receipt's reviews and plan read only where it is revoked."""
    out: dict[str, str] = {}
    for rid in store.revoked_receipts(list(ids)):
        e = store.entry(rid)
        doc = revocation_document(store, e, mirrors, plan) if e is not None else None
        if doc is not None and doc["effective"]:
            unweighed = "" if doc["weighed"] != NOT_WEIGHED else f" ({NOT_WEIGHED})"
            out[rid] = f"{doc['text']}{unweighed}"
    return out
