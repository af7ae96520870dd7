"""Verify one receipt against the ledger it lives in (reads the store; the
offline verifier in `ledger.verify.bundle` does not)."""

from __future__ import annotations

import json

from ledger._internal.checkpoint import parse_checkpoint
from ledger.evidence.errors import NotFoundError
from ledger.evidence.keys import KeyInfo
from ledger.store.store import Store
from ledger.transparency.proofs import current_inclusion, inclusion
from ledger.verify.envelope import verify_entry
from ledger.verify.facts import Registry, revoked_receipt
from ledger.verify.report import LogState, VerificationReport, review_item
from ledger.verify.standing import standing

__all__ = ["keys_at", "standing", "verify_in_ledger"]


def keys_at(store: Store, seq: int) -> dict[str, KeyInfo]:
    """Keys as the log knew them just before entry `seq` (later revocations kept,
    since verification compares the revocation's position with `seq`)."""
    return {k: v for k, v in store.keys().items() if v.seq < seq}


def verify_in_ledger(store: Store, ref: str) -> VerificationReport:
    """Verify a logged receipt or review: signature, key, role, id, log inclusion.

    Read-only: it never signs a checkpoint."""
    entry = store.resolve(ref)
    v = verify_entry(entry, keys_at(store, entry.seq))
    time: str | None = None
    try:
        inc = inclusion(store, entry.seq, None)
        size, how = inc.size, f"verified against the signed checkpoint at size {inc.size}"
        anchor = "this ledger's signed checkpoint"
        time = parse_checkpoint(inc.note).timestamp
    except NotFoundError:
        # No signed checkpoint covers it yet; verifying writes nothing, so prove
        # inclusion against the root recomputed from the rows and say so.
        size, _ = current_inclusion(store, entry.seq)
        how = "verified against the current root (no signed checkpoint covers it yet)"
        anchor = "this ledger's current root"
    keys = store.keys()
    signer = keys[v.signer]
    checked = [(r, verify_entry(r, keys_at(store, r.seq))) for r in store.review_entries([v.id])]
    reviews = [review_item(rv, keys) for _, rv in checked]
    report = VerificationReport(
        id=v.id,
        kind=v.kind,
        signer=v.signer,
        signer_name=signer.name,
        signer_role=signer.role,
        anchor=anchor,
        log=LogState(index=entry.seq, size=size, origin=None, inclusion=how, time=time),
        statement=json.loads(v.payload),
        reviews=reviews,
        unanchored_reviews=[],
        signer_seq=signer.seq,
    )
    revoked = None
    rev = store.revoked_receipts([v.id]).get(v.id) if v.kind == "receipt" else None
    if rev is not None:
        sound = [
            (rv.id, rv.document["predicate"]["verdict"], rv.signer, r.seq) for r, rv in checked
        ]
        outcome = str(report.statement["predicate"].get("outcome"))
        revoked = revoked_receipt(rev, outcome, v.signer, sound)
    # The ledger's own key table, as of now: fresh.
    registry = Registry(
        as_of=store.size(),
        source="ledger",
        key_revoked=None
        if signer.revoked_seq is None
        else (signer.revoked_seq, signer.revoked_reason or ""),
        receipt_revoked=revoked,
    )
    return report._replace(registry=registry).with_facts()
