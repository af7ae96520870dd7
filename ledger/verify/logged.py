"""Verify one receipt against the ledger it lives in."""

from __future__ import annotations

import json
from typing import Any

from ledger._internal import merkle
from ledger.errors import NotFoundError, VerificationError
from ledger.ingest import verify_envelope
from ledger.log import inclusion
from ledger.models import Envelope, ReviewStatement
from ledger.store.store import KeyInfo, Store

__all__ = ["keys_at", "verify_in_ledger"]


def keys_at(store: Store, seq: int) -> dict[str, KeyInfo]:
    """Keys as the log knew them just before entry `seq` (later revocations kept,
    since verify_envelope compares revocation position with `seq`)."""
    return {k: v for k, v in store.keys().items() if v.seq < seq}


def verify_in_ledger(store: Store, ref: str) -> dict[str, Any]:
    """Verify a logged receipt or review: signature, key, role, id, log inclusion.

    Read-only: it never signs a checkpoint."""
    entry = store.resolve(ref)
    env = Envelope.model_validate(json.loads(entry.body))
    v = verify_envelope(env, keys_at(store, entry.seq), at_seq=entry.seq)
    if v.id != entry.entry_id:
        raise VerificationError(f"entry {entry.seq}: id differs from its payload digest")
    try:
        inc = inclusion(store, entry.seq, None)
        log_state = {"index": inc.index, "checkpoint_size": inc.size, "inclusion": "verified"}
    except NotFoundError:
        # No signed checkpoint covers it yet; verifying writes nothing, so prove
        # inclusion against the root recomputed from the rows and say so.
        leaves = store.leaf_hashes()
        root = merkle.root(leaves)
        merkle.verify_inclusion(
            entry.seq,
            len(leaves),
            leaves[entry.seq],
            merkle.inclusion_proof(entry.seq, leaves),
            root,
        )
        log_state = {
            "index": entry.seq,
            "size": len(leaves),
            "inclusion": "verified against the current root (no signed checkpoint covers it yet)",
        }
    signer = store.keys()[v.signer]
    reviews = []
    for r in store.review_entries([entry.entry_id]):
        renv = Envelope.model_validate(json.loads(r.body))
        rv = verify_envelope(renv, keys_at(store, r.seq), at_seq=r.seq)
        assert isinstance(rv.statement, ReviewStatement)
        reviews.append(
            {"id": rv.id, "verdict": rv.statement.predicate.verdict, "signer": rv.signer}
        )
    return {
        "verified": True,
        "id": v.id,
        "kind": v.kind,
        "signer": f"{signer.name} ({v.signer[:12]}, {signer.role})",
        "log": log_state,
        "reviews": reviews,
    }
