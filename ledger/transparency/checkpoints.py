"""Signed checkpoints of the log: the log's origin, signing one, checking one,
and rotating the ledger key that signs them."""

from __future__ import annotations

from collections.abc import Iterable

from ledger._internal import merkle
from ledger._internal.checkpoint import (
    Checkpoint,
    key_hint,
    parse_checkpoint,
    sign_checkpoint,
    verify_by_key,
)
from ledger.evidence.errors import CheckpointError, UsageError, VerificationError
from ledger.evidence.keys import KeyDir, KeyInfo, LocalKey, active_ledger_key
from ledger.store.store import Store

__all__ = ["checkpoint", "ledger_signer", "origin", "rotate_ledger_key", "verify_note"]


def origin(store: Store) -> str:
    """The log's name in checkpoints: stable for the life of its first ledger key
    (a rotation changes the signer, never the origin)."""
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
    # Signed under the origin, as C2SP tlog-checkpoint names the log's key (a
    # tlog-policy's log vkey and witnesses go by it). Notes signed before
    # under the ledger key's own name keep verifying: verifiers match a line
    # by its key hint, whatever its name.
    # No extension lines: a C2SP tlog-witness in its default configuration refuses
    # a checkpoint that carries any (400), and the time a reviewer can trust is the
    # witnesses' own, in each cosignature. Notes signed before with a `timestamp`
    # line are kept as they are (a signed note is never rewritten) and verify.
    note = sign_checkpoint(
        origin(store), size, root, key_name=origin(store), private_key=local.private
    )
    # A concurrent signer of the same size may have won: its note is the one kept.
    return store.add_checkpoint(size, root.hex(), note.decode()).encode()


def may_sign(k: KeyInfo, size: int) -> bool:
    """A ledger key signs checkpoints from its registration until its revocation:
    a checkpoint must cover the key's own entry and no later revocation of it."""
    return k.role == "ledger" and k.seq < size and (k.revoked_seq is None or size <= k.revoked_seq)


def ledger_signer(keys: Iterable[KeyInfo], note: bytes) -> tuple[KeyInfo, Checkpoint]:
    """The ledger key that signed `note` (any registered one, rotated-out ones included)."""
    try:
        cp = parse_checkpoint(note)
    except CheckpointError as e:
        raise VerificationError(f"checkpoint: {e}") from None
    problem = "no signature by a ledger key of this log"
    for k in keys:
        if k.role != "ledger" or not any(
            sig.key_hint == key_hint(sig.name, k.public) for sig in cp.signatures
        ):
            continue
        if not may_sign(k, cp.size):
            problem = f"signed by ledger key {k.name} outside its term"
            continue
        try:
            return k, verify_by_key(note, k.public)
        except CheckpointError as e:
            problem = str(e)
    raise VerificationError(f"checkpoint: {problem}")


def verify_note(store: Store, note: bytes) -> Checkpoint:
    """Verify a checkpoint note against the ledger key that signed it."""
    return ledger_signer(store.keys().values(), note)[1]


def rotate_ledger_key(store: Store, keys: KeyDir, name: str | None = None) -> tuple[KeyInfo, str]:
    """Make a new ledger key, register it, and revoke the one it replaces.

    Checkpoints signed so far keep verifying under the old key (its term ends
    at its revocation); new checkpoints are signed by the new key. Returns
    (the old key, the new key id).
    """
    from ledger.write.ingest import register_key, revoke_key

    old = active_ledger_key(store.keys())
    taken = {k.name for k in store.keys().values()} | set(keys.names())
    if name is None:
        n = 2
        while f"ledger-{n}" in taken:
            n += 1
        name = f"ledger-{n}"
    elif name in taken:
        raise UsageError(f"a key named {name!r} already exists")
    # A checkpoint of the log as the old key leaves it, while it may still sign.
    if store.size() > 0 and keys.file(old.name).exists():
        checkpoint(store, keys)
    local = keys.create(name)
    kid, _ = register_key(store, name, "ledger", local.public, rotation=True)
    # Signed by the new ledger key: the old one's private half may be what is lost.
    revoke_key(store, old.keyid, f"rotated to ledger key {name} ({kid[:12]})", key=local)
    return old, kid
