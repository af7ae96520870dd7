"""Inclusion and consistency proofs over the store, against signed checkpoints."""

from __future__ import annotations

from dataclasses import dataclass

from ledger._internal import merkle
from ledger.evidence.errors import MerkleError, NotFoundError, VerificationError
from ledger.evidence.keys import KeyDir
from ledger.store.store import Store
from ledger.transparency.checkpoints import checkpoint, verify_note

__all__ = ["Inclusion", "consistency", "inclusion"]


@dataclass(frozen=True, slots=True)
class Inclusion:
    index: int
    size: int
    proof: list[bytes]
    note: bytes
    leaves: list[bytes]
    """The leaf hashes the checkpoint covers (callers proving more entries reuse them)."""

    def to_json(self, entry_id: str) -> dict[str, object]:
        """What `ledger log proof --json` prints."""
        return {
            "id": entry_id,
            "index": self.index,
            "size": self.size,
            "proof": [h.hex() for h in self.proof],
            "checkpoint": self.note.decode(),
        }


def inclusion(store: Store, seq: int, keys: KeyDir | None) -> Inclusion:
    """Inclusion proof of entry `seq` against the newest checkpoint covering it.

    Signs a new checkpoint when none covers the entry and the ledger's private
    key is at hand.
    """
    latest = store.latest_checkpoint()
    if latest is None or latest.size <= seq:
        if keys is None:
            raise NotFoundError("no checkpoint covers this entry yet; run `ledger log checkpoint`")
        note = checkpoint(store, keys)
    else:
        note = latest.note.encode()
    cp = verify_note(store, note)
    leaves = store.leaf_hashes(upto=cp.size)
    proof = merkle.inclusion_proof(seq, leaves)
    # Against the signed root, not one recomputed here: this also proves the
    # rows still agree with what the ledger key signed.
    try:
        merkle.verify_inclusion(seq, cp.size, leaves[seq], proof, cp.root)
    except MerkleError as e:
        raise VerificationError(f"entry {seq} does not match checkpoint {cp.size}: {e}") from None
    # With the witnesses' cosignatures kept for it (C2SP tlog-cosignature lines,
    # which verifiers without a policy ignore).
    note += "".join(store.cosignatures(cp.size)).encode()
    return Inclusion(seq, cp.size, proof, note, leaves)


def current_inclusion(store: Store, seq: int) -> tuple[int, list[bytes]]:
    """Inclusion of `seq` against the root recomputed from the rows (no checkpoint
    needed, nothing written); returns (size, proof) once it holds."""
    leaves = store.leaf_hashes()
    proof = merkle.inclusion_proof(seq, leaves)
    merkle.verify_inclusion(seq, len(leaves), leaves[seq], proof, merkle.root(leaves))
    return len(leaves), proof


def consistency(store: Store, old: int, new: int) -> list[bytes]:
    """Consistency proof between two checkpointed sizes, verified before it is returned."""
    a, b = store.checkpoint(old), store.checkpoint(new)
    for size, row in ((old, a), (new, b)):
        if row is None:
            raise NotFoundError(f"no checkpoint at size {size}")
    assert a is not None and b is not None
    # The signed roots, not the `root` columns beside them.
    ca = verify_note(store, a.note.encode())
    cb = verify_note(store, b.note.encode())
    leaves = store.leaf_hashes(upto=new)
    proof = merkle.consistency_proof(old, new, leaves)
    try:
        merkle.verify_consistency(old, new, ca.root, cb.root, proof)
    except MerkleError as e:
        raise VerificationError(f"log is not consistent between {old} and {new}: {e}") from None
    return proof
