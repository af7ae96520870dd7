"""Fork and rollback checks between two checkpoints (no database needed).

A log that shows one root to one reader and another root to another at the
same size, or that goes back to an older state, is caught here: the newer
checkpoint must extend the older one by a consistency proof (RFC 9162), and
its timestamp line must not go backwards. Used by `ledger log witness`,
`ledger log consistency --from` and `ledger verify BUNDLE --checkpoint`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ledger._internal import merkle
from ledger._internal.checkpoint import Checkpoint, key_hint, parse_checkpoint, verify_checkpoint
from ledger.evidence.errors import Error, VerificationError

__all__ = ["Newer", "check_extends", "parse_newer", "signed_by_any"]


def _root(cp: Checkpoint) -> str:
    return base64.b64encode(cp.root).decode()


def check_extends(old: Checkpoint, new: Checkpoint, proof: Sequence[bytes]) -> None:
    """VerificationError naming both checkpoints unless `new` extends `old`."""
    both = f"held size {old.size} root {_root(old)}; now size {new.size} root {_root(new)}"
    if old.origin != new.origin:
        raise VerificationError(f"checkpoints of different logs ({old.origin}, {new.origin})")
    if new.size < old.size:
        raise VerificationError(f"rollback: the log is smaller than a checkpoint seen ({both})")
    if old.timestamp and new.timestamp and new.timestamp < old.timestamp:
        raise VerificationError(f"replay: an older checkpoint than one seen ({both})")
    try:
        merkle.verify_consistency(old.size, new.size, old.root, new.root, proof)
    except merkle.MerkleError as e:
        raise VerificationError(
            f"fork: the log does not extend a checkpoint seen ({both}): {e}"
        ) from None


def signed_by_any(note: bytes, keys: Iterable[Ed25519PublicKey]) -> Checkpoint:
    """The checkpoint, once one of `keys` signed it (matched by each line's key hint)."""
    cp = parse_checkpoint(note)
    candidates = list(keys)
    for sig in cp.signatures:
        for pub in candidates:
            if sig.key_hint != key_hint(sig.name, pub):
                continue
            try:
                return verify_checkpoint(note, key_name=sig.name, public_key=pub)
            except Error:
                continue
    raise VerificationError("checkpoint is not signed by a trusted ledger key")


class Newer:
    """A newer checkpoint a verifier trusts, with the proof that it extends an older one."""

    def __init__(self, note: bytes, old_size: int | None, proof: list[bytes]) -> None:
        self.note = note
        self.old_size = old_size
        self.proof = proof


def parse_newer(raw: bytes) -> Newer:
    """A bare checkpoint note, or the JSON of `ledger log consistency --from ... --json`
    (also served at /v1/log/consistency): {"old", "new", "proof", "checkpoint"}."""
    if not raw.lstrip().startswith(b"{"):
        return Newer(raw, None, [])
    from ledger.evidence.limits import load_json

    doc: Any = load_json(raw, "checkpoint file")
    try:
        note = str(doc["checkpoint"]).encode()
        old = doc["old"]
        proof = [bytes.fromhex(h) for h in doc["proof"]]
    except (KeyError, TypeError, ValueError):
        raise VerificationError("checkpoint file: expected checkpoint, old and proof") from None
    if not isinstance(old, int) or isinstance(old, bool):
        raise VerificationError("checkpoint file: old is not an integer")
    return Newer(note, old, proof)


def consistency_doc(
    old: Checkpoint, new: Checkpoint, note: bytes, proof: list[bytes]
) -> dict[str, Any]:
    return {
        "old": old.size,
        "new": new.size,
        "old_root": _root(old),
        "new_root": _root(new),
        "proof": [h.hex() for h in proof],
        "checkpoint": note.decode(),
    }


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2)


def check_bundle_against(bundle: bytes, newer_raw: bytes, trust: list[Ed25519PublicKey]) -> str:
    """The bundle's checkpoint is a prefix of a newer one the verifier trusts
    (signed by a --trust key or a ledger key the bundle carries); one line."""
    from ledger.evidence.entry import LoggedEntry
    from ledger.evidence.limits import load_json

    doc: Any = load_json(bundle, "bundle")
    old = parse_checkpoint(str(doc["checkpoint"]).encode())
    publics = list(trust)
    for item in doc.get("keys", []):
        try:
            info = LoggedEntry(0, "key", "", str(item["body"]).encode()).key()
        except (Error, KeyError, TypeError):
            continue
        if info.role == "ledger":
            publics.append(info.public)
    newer = parse_newer(newer_raw)
    new = signed_by_any(newer.note, publics)
    if newer.old_size is None and new.size != old.size:
        raise VerificationError(
            f"checkpoint at size {new.size} needs a consistency proof from size {old.size}: "
            f"give the JSON of /v1/log/consistency?from={old.size} or "
            "`ledger log consistency --from BUNDLE_CHECKPOINT --json`"
        )
    if newer.old_size is not None and newer.old_size != old.size:
        raise VerificationError(
            f"the consistency proof starts at size {newer.old_size}, the bundle's is {old.size}"
        )
    check_extends(old, new, newer.proof)
    return f"consistent with the trusted checkpoint at size {new.size}"
