"""A revocation is an authority's assertion, so it counts only as exactly signed.

A revocation entry's body names a receipt (`ledger revoke`) or a key (`ledger keys
revoke`). Earlier releases logged that document itself, unsigned: anyone able to write
to the database could have logged one. From this release the document is the payload of
a DSSE envelope (Ed25519, the same machinery as receipts and reviews) signed by the
revoking authority, and the body is ``{"kind": "revocation", "signed": ENVELOPE}``, with
``revoked_by`` beside it where a server logged it for a token holder (the server's
observation, not the signer's assertion).

Who may sign, by a key the log registered before the revocation and had not revoked
before it:

- a receipt's revocation on the operator's word: a `ledger` key (the operator's);
- a receipt's revocation on a reviewer's word: a `reviewer` key (the judge also holds
  it to the key that signed the dispute it names: `qualification.revocation`);
- a key's revocation: a `ledger` key, or the revoked key itself (its holder retiring it).

A new-form entry whose signature does not verify, or whose signer may not assert it,
counts nowhere and is shown with why (`problem`). An entry of the earlier form keeps
its meaning, shown as `UNSIGNED`: never dropped silently.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from ledger.evidence import dsse
from ledger.evidence.canonical import canonical_bytes
from ledger.evidence.errors import Error, RefusedError
from ledger.evidence.keys import KeyInfo, LocalKey

__all__ = [
    "REVOCATION_PAYLOAD_TYPE",
    "UNSIGNED",
    "Signature",
    "check",
    "read_signed",
    "sign_revocation",
    "signed_body",
]

REVOCATION_PAYLOAD_TYPE = "application/vnd.ledger.revocation+json"
"""The DSSE payload type of a revocation document."""

UNSIGNED = "unsigned (recorded before signed revocations)"
"""What every surface says of a revocation of the earlier, unsigned form."""

NOT_CHECKED = "its signature is not checked here"
"""A signed revocation read without the key registry: it counts for nothing until
`check` verified it (so a reader that forgets to check fails closed)."""


class Signature(NamedTuple):
    """A revocation entry's signature as checked against the log's key registry."""

    signer: str | None
    """The key id that signed it (verified where `problem` is None); None: unsigned."""
    problem: str | None
    """Why it does not count; None: it counts (signed by its authority, or `UNSIGNED`)."""

    @property
    def unsigned(self) -> bool:
        return self.signer is None and self.problem is None


def sign_revocation(doc: bytes, key: LocalKey) -> dict[str, Any]:
    """The envelope (as JSON) of revocation document `doc` signed by `key`."""
    return dsse.envelope_json(dsse.sign(doc, key, REVOCATION_PAYLOAD_TYPE))


def signed_body(envelope: Mapping[str, Any], revoked_by: str | None = None) -> bytes:
    """A revocation entry's body around a signed envelope; `revoked_by`: the token
    holder who sent it to a server."""
    doc: dict[str, Any] = {"kind": "revocation", "signed": dict(envelope)}
    if revoked_by is not None:
        doc["revoked_by"] = revoked_by
    return canonical_bytes(doc)


def read_signed(body_doc: Any) -> tuple[dict[str, Any], dsse.ReadEnvelope] | None:
    """(the revocation document it asserts, its envelope) of a new-form body; None for
    a body of the earlier form. RefusedError where the envelope or its payload does not
    read as a revocation document."""
    if not isinstance(body_doc, dict) or "signed" not in body_doc:
        return None
    env = dsse.read_envelope(body_doc["signed"])
    if env.payloadType != REVOCATION_PAYLOAD_TYPE or not env.signatures:
        raise RefusedError("not a signed revocation")
    try:
        doc = json.loads(base64.b64decode(env.payload, validate=True))
    except (binascii.Error, ValueError, RecursionError):
        raise RefusedError("not a signed revocation") from None
    if not isinstance(doc, dict) or doc.get("kind") != "revocation":
        raise RefusedError("not a signed revocation")
    holder = body_doc.get("revoked_by")
    if isinstance(holder, str):
        doc["revoked_by"] = holder  # the server's observation, beside the assertion
    else:
        doc.pop("revoked_by", None)  # only the server says who held the token
    return doc, env


def _may_sign(doc: Mapping[str, Any], signer: KeyInfo) -> bool:
    if "keyid" in doc:
        return signer.role == "ledger" or signer.keyid == doc["keyid"]
    return signer.role == ("reviewer" if doc.get("by") == "reviewer" else "ledger")


def _authority(doc: Mapping[str, Any]) -> str:
    if "keyid" in doc:
        return "a ledger key or the revoked key itself"
    return "a reviewer key" if doc.get("by") == "reviewer" else "a ledger key (the operator's)"


def check(seq: int, body_doc: Any, keys: Mapping[str, KeyInfo], parsed: Any = None) -> Signature:
    """The signature of the revocation entry at `seq` with body `body_doc`, checked
    against `keys` (the registry as of the entry: a key revoked at or after `seq`
    still signed it standing). `parsed`: `read_signed`'s answer where already read."""
    try:
        got = parsed if parsed is not None else read_signed(body_doc)
    except Error as e:
        return Signature(None, f"its signature does not read ({e.reason()})")
    if got is None:
        return Signature(None, None)
    doc, env = got
    kid = env.signatures[0].keyid
    if len(env.signatures) != 1:
        return Signature(kid, "it carries more than one signature")
    info = keys.get(kid)
    if info is None or info.seq >= seq:
        return Signature(kid, f"signed by key {kid[:12]}, which the log had not registered")
    if info.revoked_seq is not None and info.revoked_seq < seq:
        return Signature(kid, f"signed by key {info.name}, revoked at entry {info.revoked_seq}")
    if not _may_sign(doc, info):
        return Signature(
            kid, f"signed by {info.name} ({info.role}); only {_authority(doc)} may assert it"
        )
    try:
        dsse.verify(env, {kid: info.public})
    except Error:
        return Signature(kid, f"its signature by {info.name} does not verify")
    return Signature(kid, None)
