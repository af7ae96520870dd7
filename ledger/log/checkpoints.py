"""Signed checkpoints of the log: the log's origin, signing one, checking one."""

from __future__ import annotations

from ledger._internal import merkle
from ledger._internal.checkpoint import Checkpoint, sign_checkpoint, verify_checkpoint
from ledger.errors import CheckpointError, UsageError, VerificationError
from ledger.keys import KeyDir, LocalKey, active_ledger_key
from ledger.store.store import Store

__all__ = ["checkpoint", "origin", "verify_note"]


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
    info = active_ledger_key(store.keys())
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
    info = active_ledger_key(store.keys())
    try:
        return verify_checkpoint(note, key_name=info.name, public_key=info.public)
    except CheckpointError as e:
        raise VerificationError(f"checkpoint: {e}") from None
