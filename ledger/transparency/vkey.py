"""Signed-note verifier keys (C2SP signed-note, "vkey"): ``name+hexid+base64(type||key)``.

Type 0x01 is a log's Ed25519 key (it signs checkpoints); type 0x04 a witness's
Ed25519 key (timestamped cosignatures, C2SP tlog-cosignature). The key id is
``SHA-256(name || 0x0A || type || 32-byte key)[:4]``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import NamedTuple

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ledger.evidence.errors import InputError

__all__ = ["LOG_ED25519", "WITNESS_ED25519", "VKey", "key_id", "parse_vkey", "valid_note_name"]

LOG_ED25519 = 0x01
WITNESS_ED25519 = 0x04


def valid_note_name(name: str) -> bool:
    """A signed-note key name: non-empty, no Unicode space, no '+'."""
    return bool(name) and "+" not in name and not any(c.isspace() for c in name)


def key_id(name: str, sig_type: int, public: Ed25519PublicKey) -> bytes:
    """The 4-byte key id of `public` under `name` for signature type `sig_type`."""
    raw = public.public_bytes_raw()
    return hashlib.sha256(name.encode() + b"\n" + bytes([sig_type]) + raw).digest()[:4]


class VKey(NamedTuple):
    """A verifier key: the note key name, its signature type and Ed25519 public key."""

    name: str
    sig_type: int
    public: Ed25519PublicKey

    @property
    def id(self) -> bytes:
        return key_id(self.name, self.sig_type, self.public)

    @property
    def raw(self) -> bytes:
        return self.public.public_bytes_raw()

    def text(self) -> str:
        """The vkey string."""
        blob = base64.b64encode(bytes([self.sig_type]) + self.raw).decode()
        return f"{self.name}+{self.id.hex()}+{blob}"


def parse_vkey(text: str, what: str = "vkey") -> VKey:
    """Parse a vkey of type 0x01 or 0x04; InputError with the reason otherwise.

    The hex id must be the one the name, type and key give (a vkey whose id
    was edited is refused rather than silently matched)."""
    parts = text.split("+", 2)
    if len(parts) != 3:
        raise InputError(f"{what}: not NAME+KEYID+KEY: {text!r}")
    name, hexid, blob = parts
    if not valid_note_name(name):
        raise InputError(f"{what}: invalid key name {name!r}")
    try:
        want = bytes.fromhex(hexid)
        raw = base64.b64decode(blob, validate=True)
    except (ValueError, binascii.Error):
        raise InputError(f"{what}: malformed key id or key in {text!r}") from None
    if len(want) != 4 or len(hexid) != 8:
        raise InputError(f"{what}: the key id must be 8 hex digits: {text!r}")
    if len(raw) != 33 or raw[0] not in (LOG_ED25519, WITNESS_ED25519):
        raise InputError(f"{what}: not an Ed25519 key of type 0x01 or 0x04: {text!r}")
    key = VKey(name, raw[0], Ed25519PublicKey.from_public_bytes(raw[1:]))
    if key.id != want:
        raise InputError(f"{what}: key id {hexid} does not match the name and key of {text!r}")
    return key
