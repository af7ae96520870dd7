"""Transparency-log operations over the store: checkpoints and proofs."""

from __future__ import annotations

from dataclasses import dataclass

from ledger._internal import merkle
from ledger.checkpoint import Checkpoint, CheckpointError, sign_checkpoint, verify_checkpoint
from ledger.errors import NotFoundError, UsageError, VerificationError
from ledger.keys import KeyDir, LocalKey
from ledger.store.store import KeyInfo, Store

__all__ = ["Inclusion", "checkpoint", "consistency", "inclusion", "ledger_key", "origin"]


def ledger_key(store: Store) -> KeyInfo:
    """The active key with role `ledger` (signs checkpoints)."""
    live = [k for k in store.keys().values() if k.role == "ledger" and k.revoked_seq is None]
    if not live:
        raise UsageError("this ledger has no active ledger key; run `ledger init`")
    return live[-1]


def origin(store: Store) -> str:
    """The log's name in checkpoints: stable for the life of its first ledger key."""
    first = min(
        (k for k in store.keys().values() if k.role == "ledger"), key=lambda k: k.seq, default=None
    )
    if first is None:
        raise UsageError("this ledger has no ledger key; run `ledger init`")
    return f"ledger/{first.keyid[:16]}"


def checkpoint(store: Store, keys: KeyDir, *, size: int | None = None) -> bytes:
    """Sign (or reuse) a checkpoint of the log at `size` (default: now)."""
    entries = store.size()
    size = entries if size is None else size
    if not 0 < size <= entries:
        raise UsageError(f"the log has {entries} entries; no checkpoint at size {size}")
    existing = store.checkpoint(size)
    if existing is not None:
        return existing.note.encode()
    info = ledger_key(store)
    local: LocalKey = keys.load(info.name)
    if local.keyid != info.keyid:
        raise UsageError(
            f"private key {info.name!r} does not match the ledger key {info.keyid[:12]}"
        )
    # The leaves are read only when a new checkpoint is signed.
    root = merkle.root(store.leaf_hashes(upto=size))
    note = sign_checkpoint(origin(store), size, root, key_name=info.name, private_key=local.private)
    store.add_checkpoint(size, root.hex(), note.decode())
    return note


def verify_note(store: Store, note: bytes) -> Checkpoint:
    """Verify a stored checkpoint note against the ledger's key."""
    info = ledger_key(store)
    try:
        return verify_checkpoint(note, key_name=info.name, public_key=info.public)
    except CheckpointError as e:
        raise VerificationError(f"checkpoint: {e}") from None


@dataclass(frozen=True, slots=True)
class Inclusion:
    index: int
    size: int
    proof: list[bytes]
    note: bytes
    leaves: list[bytes]
    """The leaf hashes the checkpoint covers (callers proving more entries reuse them)."""


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
    except merkle.MerkleError as e:
        raise VerificationError(f"entry {seq} does not match checkpoint {cp.size}: {e}") from None
    return Inclusion(seq, cp.size, proof, note, leaves)


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
    except merkle.MerkleError as e:
        raise VerificationError(f"log is not consistent between {old} and {new}: {e}") from None
    return proof
