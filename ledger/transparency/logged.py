"""Verify one receipt against the ledger it lives in (reads the store; the
offline verifier in `ledger.verify.bundle` does not)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from ledger.evidence.entry import LoggedEntry
from ledger.evidence.errors import Error, NotFoundError
from ledger.evidence.keys import KeyInfo
from ledger.evidence.kinds import ROLE_FOR
from ledger.evidence.statement import kind_of
from ledger.store.store import Store
from ledger.transparency.proofs import current_inclusion, inclusion
from ledger.verify.envelope import verify_entry
from ledger.verify.report import LogState, VerificationReport, review_item
from ledger.verify.strict import check_signers

__all__ = ["keys_at", "standing", "verify_in_ledger"]


def standing(entry: LoggedEntry, keys: Mapping[str, KeyInfo]) -> str | None:
    """Why a logged receipt or review does not count, as the key table has it
    now, or None: every signer registered before the entry, of the role that
    may sign it, not revoked before it; the id the digest of the payload.

    No signature is verified again: ingest verified each one before the entry
    was written, and the append-only log keeps it so. `ledger audit` and
    `ledger verify` re-check every signature; a revocation is a fact of the
    key table, read here.
    """
    try:
        stmt = entry.statement
        if not entry.payload_matches_id:
            return f"entry {entry.seq}: id differs from its payload digest"
        signers = list(entry.signers)
        roles = {
            k: (info.name, info.role, info.revoked_seq, info.revoked_reason)
            for k in signers
            if (info := keys.get(k)) is not None and info.seq < entry.seq
        }
        check_signers(
            signers, signers, roles, ROLE_FOR[stmt.predicateType], kind_of(stmt), entry.seq
        )
    except Error as e:
        return e.reason()
    return None


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
        unanchored_reviews=[],
    )
