"""Export a bundle: a receipt's entry, its reviews, its signers' keys and the
revocations of either, each with an inclusion proof against one signed
checkpoint (`ledger.verify.bundle` checks it offline)."""

from __future__ import annotations

from typing import Any

from ledger._internal import merkle
from ledger.evidence.canonical import canonical_bytes
from ledger.evidence.entry import LoggedEntry
from ledger.evidence.keys import KeyDir
from ledger.evidence.models import BUNDLE_TYPE
from ledger.store.store import Store
from ledger.transparency.proofs import inclusion

__all__ = ["export"]


def _revocation_seqs(store: Store, entry: LoggedEntry, signers: set[str]) -> list[int]:
    """The revocations a verifier needs to see: the signers' keys' (the first each,
    the one that counts) and the receipt's own."""
    all_keys = store.keys()
    seqs = {k.revoked_seq for s in signers if (k := all_keys.get(s)) and k.revoked_seq is not None}
    if entry.kind == "receipt":
        rev = store.revoked_receipts([entry.entry_id]).get(entry.entry_id)
        if rev is not None:
            seqs.add(rev.seq)
    return sorted(seqs)


def export(store: Store, ref: str, keys: KeyDir | None) -> bytes:
    entry = store.resolve(ref)
    reviews = store.review_entries([entry.entry_id]) if entry.kind == "receipt" else []
    revoked = _revocation_seqs(store, entry, {s for e in [entry, *reviews] for s in e.signers})
    # A checkpoint covering the newest review and revocation too; signed afresh when
    # the key is here.
    inc = inclusion(store, max([entry.seq, *(r.seq for r in reviews), *revoked]), keys)
    reviews = [r for r in reviews if r.seq < inc.size]
    leaves = inc.leaves

    def item(e: LoggedEntry) -> dict[str, Any]:
        proof = merkle.inclusion_proof(e.seq, leaves)
        doc: dict[str, Any] = {"index": e.seq, "body": e.body.decode()}
        # The time only where the leaf commits to it (not in ledgers from before).
        if e.logged_at is not None and leaves[e.seq] == merkle.entry_leaf(
            e.seq, e.logged_at, e.body
        ):
            doc["logged_at"] = e.logged_at
        doc["proof"] = [h.hex() for h in proof]
        return doc

    signers = {s for e in [entry, *reviews] for s in e.signers}
    all_keys = store.keys()
    # Every ledger key: whichever one signed this checkpoint (before or after
    # a rotation), the verifier finds it in the bundle.
    ledger_seqs = {k.seq for k in all_keys.values() if k.role == "ledger" and k.seq < inc.size}
    key_seqs = sorted({all_keys[k].seq for k in signers if k in all_keys} | ledger_seqs)
    doc = {
        "mediaType": BUNDLE_TYPE,
        "id": entry.entry_id,
        "checkpoint": inc.note.decode(),
        "entry": item(entry),
        "reviews": [item(r) for r in reviews],
        "keys": [item(k) for k in store.entries_at(key_seqs)],
    }
    if revoked:
        # Only where there is one: a verifier of an earlier release reads no such
        # field and verifies the bundle as before; this one refuses what it revokes.
        doc["revocations"] = [item(r) for r in store.entries_at(revoked)]
    return canonical_bytes(doc)
