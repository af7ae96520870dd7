"""DSSE envelopes: pre-authentication encoding, signing and verification.

We hash and verify the exact payload bytes carried in the envelope; nothing
is re-serialized before verification.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import ValidationError

from ledger.errors import InputError, RefusedError, VerificationError, first_validation_error
from ledger.keys import LocalKey
from ledger.limits import load_json
from ledger.models import IN_TOTO_PAYLOAD_TYPE, Envelope, Signature

__all__ = ["MAX_ENVELOPE_BYTES", "decode_payload", "pae", "parse_envelope", "sign", "verify"]

# A receipt is a few KB; measurements and artifact lists stay small because
# artifacts are referenced by digest. 1 MiB leaves ample room while keeping a
# hostile input from filling the database.
MAX_ENVELOPE_BYTES = 1024 * 1024


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSEv1 pre-authentication encoding."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def sign(payload: bytes, key: LocalKey, payload_type: str = IN_TOTO_PAYLOAD_TYPE) -> Envelope:
    sig = key.sign(pae(payload_type, payload))
    return Envelope(
        payloadType=payload_type,
        payload=base64.b64encode(payload).decode(),
        signatures=[Signature(keyid=key.keyid, sig=base64.b64encode(sig).decode())],
    )


def parse_envelope(raw: bytes) -> Envelope:
    """Parse envelope JSON, refusing oversized, malformed or wrongly typed input."""
    if len(raw) > MAX_ENVELOPE_BYTES:
        raise RefusedError(
            f"envelope is {len(raw)} bytes, over the {MAX_ENVELOPE_BYTES}-byte limit"
        )
    try:
        data = load_json(raw, "")
    except InputError as e:
        raise RefusedError(e.reason()) from None
    try:
        env = Envelope.model_validate(data)
    except ValidationError as e:
        raise RefusedError(
            f"malformed DSSE envelope: {first_validation_error(e, 'envelope')}"
        ) from None
    if env.payloadType != IN_TOTO_PAYLOAD_TYPE:
        raise RefusedError(
            f"wrong payloadType {env.payloadType!r}, expected {IN_TOTO_PAYLOAD_TYPE!r}"
        )
    return env


def _b64(text: str, what: str) -> bytes:
    """Standard base64 only: DSSE also allows URL-safe, but one alphabet keeps a
    single byte form per envelope (what we sign, log and hash is that form)."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise RefusedError(f"bad base64 in {what}") from None


def decode_payload(env: Envelope) -> bytes:
    return _b64(env.payload, "payload")


def verify(env: Envelope, keys: Mapping[str, Ed25519PublicKey]) -> tuple[bytes, list[str]]:
    """Verify every signature whose key is known; return (payload, accepted key ids).

    At least one signature must verify, and none may be a bad signature from
    a known key: a forged signature next to a good one is still tampering.
    """
    payload = decode_payload(env)
    seen: set[str] = set()
    accepted: list[str] = []
    unknown: list[str] = []
    message = pae(env.payloadType, payload)
    for s in env.signatures:
        if s.keyid in seen:
            raise VerificationError(f"duplicate signature key id {s.keyid[:16]}")
        seen.add(s.keyid)
        sig = _b64(s.sig, "signature")
        key = keys.get(s.keyid)
        if key is None:
            unknown.append(s.keyid)
            continue
        try:
            key.verify(sig, message)
        except InvalidSignature:
            raise VerificationError(f"DSSE: invalid signature by key {s.keyid[:16]}") from None
        accepted.append(s.keyid)
    if not accepted:
        raise VerificationError(f"signed by unknown key {unknown[0][:16]}")
    return payload, accepted
