"""Witness cosignatures (C2SP tlog-cosignature, cosignature/v1).

The signed message is ``cosignature/v1\\ntime <t>\\n`` followed by the whole
checkpoint body; the signature line is ``— <name> base64(keyid || u64 t || sig)``
with the key id of type 0x04 and ``t`` big-endian seconds since the epoch.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ledger._internal.checkpoint import Checkpoint
from ledger.transparency.vkey import WITNESS_ED25519, VKey, key_id

__all__ = ["cosign", "cosigned_by", "message", "witnesses_of"]

_SIG_PREFIX = "— "
_MAX_TIME = 2**64 - 1


def message(body: bytes, timestamp: int) -> bytes:
    """What a witness signs for `body` at `timestamp`."""
    return b"cosignature/v1\ntime %d\n" % timestamp + body


def cosign(body: bytes, name: str, private: Ed25519PrivateKey, timestamp: int) -> str:
    """The cosignature line (newline-terminated) of witness `name` over `body`."""
    if not 0 <= timestamp <= _MAX_TIME:
        raise ValueError(f"timestamp {timestamp} is outside 0..2**64-1")
    kid = key_id(name, WITNESS_ED25519, private.public_key())
    sig = private.sign(message(body, timestamp))
    blob = kid + struct.pack(">Q", timestamp) + sig
    return f"{_SIG_PREFIX}{name} {base64.b64encode(blob).decode()}\n"


def cosigned_by(cp: Checkpoint, witness: VKey) -> int | None:
    """The timestamp of a valid cosignature by `witness` on `cp`, else None.

    Lines of other keys (same name or same id, not both) are ignored, as the
    signed-note spec requires; a matching line that does not verify counts
    as no cosignature."""
    kid = witness.id
    for sig in cp.signatures:
        if sig.name != witness.name or sig.key_hint != kid or len(sig.signature) != 72:
            continue
        (timestamp,) = struct.unpack(">Q", sig.signature[:8])
        try:
            witness.public.verify(sig.signature[8:], message(cp.body, timestamp))
        except InvalidSignature:
            continue
        return int(timestamp)
    return None


def witnesses_of(cp: Checkpoint, witnesses: Iterable[VKey]) -> set[str]:
    """The names of `witnesses` that validly cosigned `cp`."""
    return {w.name for w in witnesses if cosigned_by(cp, w) is not None}
