"""DSSE envelopes: pre-authentication encoding, signing and verification.

We hash and verify the exact payload bytes carried in the envelope; nothing
is re-serialized before verification.

Reading and verifying build no pydantic model (`ledger.evidence.shape` checks the
envelope's shape; the `Envelope` model decides only what that check leaves
to it), so offline verification starts fast; signing builds the model.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ledger.evidence.errors import InputError, RefusedError, VerificationError
from ledger.evidence.kinds import IN_TOTO_PAYLOAD_TYPE
from ledger.evidence.limits import load_json
from ledger.evidence.shape import envelope_fits

if TYPE_CHECKING:
    from ledger.evidence.keys import LocalKey
    from ledger.evidence.models import Envelope

__all__ = [
    "IN_TOTO_PAYLOAD_TYPE",
    "MAX_ENVELOPE_BYTES",
    "EnvelopeLike",
    "ReadEnvelope",
    "ReadSignature",
    "decode_payload",
    "envelope_json",
    "pae",
    "parse_envelope",
    "read_envelope",
    "sign",
    "verify",
]

# A receipt is a few KB; measurements and artifact lists stay small because
# artifacts are referenced by digest. 1 MiB leaves ample room while keeping a
# hostile input from filling the database.
MAX_ENVELOPE_BYTES = 1024 * 1024


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSEv1 pre-authentication encoding."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


class SignatureLike(Protocol):
    @property
    def keyid(self) -> str: ...
    @property
    def sig(self) -> str: ...


class EnvelopeLike(Protocol):
    """What verification reads of an envelope: a `ReadEnvelope`, or the `Envelope` model."""

    @property
    def payloadType(self) -> str: ...
    @property
    def payload(self) -> str: ...
    @property
    def signatures(self) -> Sequence[SignatureLike]: ...


# NamedTuples, not dataclasses: they are built in a fraction of the time, and
# `ledger verify BUNDLE` pays for every class it defines on start-up.
class ReadSignature(NamedTuple):
    keyid: str
    sig: str


class ReadEnvelope(NamedTuple):
    """An envelope as read: its fields exactly as they came, shape checked."""

    payloadType: str
    payload: str
    signatures: tuple[ReadSignature, ...]


def read_envelope(data: Any) -> ReadEnvelope:
    """A decoded JSON document as a DSSE envelope; RefusedError naming the first
    field in error (`signatures: ...`, in the `Envelope` model's words) when it is not one."""
    if envelope_fits(data):
        sigs = tuple(ReadSignature(s["keyid"], s["sig"]) for s in data["signatures"])
        return ReadEnvelope(data["payloadType"], data["payload"], sigs)
    # The model decides what the shape check leaves to it, and names the error.
    from pydantic import ValidationError

    from ledger.evidence.errors import first_validation_error
    from ledger.evidence.models import Envelope

    try:
        env = Envelope.model_validate(data)
    except ValidationError as e:
        raise RefusedError(first_validation_error(e, "envelope")) from None
    sigs = tuple(ReadSignature(s.keyid, s.sig) for s in env.signatures)
    return ReadEnvelope(env.payloadType, env.payload, sigs)


def envelope_json(env: EnvelopeLike) -> dict[str, Any]:
    """The envelope as a JSON document (what the `Envelope` model dumps)."""
    return {
        "payloadType": env.payloadType,
        "payload": env.payload,
        "signatures": [{"keyid": s.keyid, "sig": s.sig} for s in env.signatures],
    }


def sign(payload: bytes, key: LocalKey, payload_type: str = IN_TOTO_PAYLOAD_TYPE) -> Envelope:
    from ledger.evidence.models import Envelope, Signature

    sig = key.sign(pae(payload_type, payload))
    return Envelope(
        payloadType=payload_type,
        payload=base64.b64encode(payload).decode(),
        signatures=[Signature(keyid=key.keyid, sig=base64.b64encode(sig).decode())],
    )


def parse_envelope(raw: bytes) -> ReadEnvelope:
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
        env = read_envelope(data)
    except RefusedError as e:
        raise RefusedError(f"malformed DSSE envelope: {e}") from None
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


def decode_payload(env: EnvelopeLike) -> bytes:
    return _b64(env.payload, "payload")


def verify(env: EnvelopeLike, keys: Mapping[str, Ed25519PublicKey]) -> tuple[bytes, list[str]]:
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
