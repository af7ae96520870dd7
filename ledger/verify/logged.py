"""Verify one receipt against the ledger it lives in (reads the store; the
offline verifier in `ledger.verify.bundle` does not)."""

from __future__ import annotations

import json

from ledger.errors import NotFoundError
from ledger.keys import KeyInfo
from ledger.log.proofs import current_inclusion, inclusion
from ledger.store.store import Store
from ledger.verify.envelope import verify_entry
from ledger.verify.report import LogState, VerificationReport, review_item

__all__ = ["keys_at", "verify_in_ledger"]


def keys_at(store: Store, seq: int) -> dict[str, KeyInfo]:
    """Keys as the log knew them just before entry `seq` (later revocations kept,
    since verification compares the revocation's position with `seq`)."""
    return {k: v for k, v in store.keys().items() if v.seq < seq}


def verify_in_ledger(store: Store, ref: str) -> VerificationReport:
    """Verify a logged receipt or review: signature, key, role, id, log inclusion.

    Read-only: it never signs a checkpoint."""
    entry = store.resolve(ref)
    v = verify_entry(entry, keys_at(store, entry.seq))
    try:
        inc = inclusion(store, entry.seq, None)
        size, how = inc.size, f"verified against the signed checkpoint at size {inc.size}"
        anchor = "this ledger's signed checkpoint"
    except NotFoundError:
        # No signed checkpoint covers it yet; verifying writes nothing, so prove
        # inclusion against the root recomputed from the rows and say so.
        size, _ = current_inclusion(store, entry.seq)
        how = "verified against the current root (no signed checkpoint covers it yet)"
        anchor = "this ledger's current root"
    keys = store.keys()
    signer = keys[v.signer]
    reviews = [
        review_item(verify_entry(r, keys_at(store, r.seq)), keys)
        for r in store.review_entries([entry.entry_id])
    ]
    return VerificationReport(
        id=v.id,
        kind=v.kind,
        signer=v.signer,
        signer_name=signer.name,
        signer_role=signer.role,
        anchor=anchor,
        log=LogState(index=entry.seq, size=size, origin=None, inclusion=how),
        statement=json.loads(v.payload),
        reviews=reviews,
    )
