"""One logged entry: the exact stored bytes beside their parsed views.

Every reader of the log (status, show, verify, bundles, audit) goes through
`LoggedEntry`, so a body is decoded one way everywhere, and the bytes that
are hashed are the bytes that were stored. The body formats of key and
revocation entries are written and read here too.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ledger.evidence import dsse
from ledger.evidence.canonical import canonical_bytes, receipt_id
from ledger.evidence.errors import InputError, RefusedError
from ledger.evidence.keys import KeyInfo, key_id, raw_public
from ledger.evidence.limits import load_json
from ledger.evidence.signed_revocation import NOT_CHECKED, Signature, check, read_signed

if TYPE_CHECKING:
    # The statement models load on first use: a bundle is verified without them.
    from ledger.evidence.models import QualificationStatement, ReviewStatement
    from ledger.evidence.statement import Statement

__all__ = [
    "LoggedEntry",
    "ReceiptRevocation",
    "envelope_body",
    "first_revocations",
    "key_body",
    "receipt_revocation_body",
    "revocation_body",
]


class ReceiptRevocation(NamedTuple):
    """One receipt revoked, as its log entry says (a NamedTuple: read offline too)."""

    seq: int
    """The revocation's own log position: from there on the receipt is void."""
    receipt: str
    reason: str
    review: str | None
    """The independent review a counterexample's revocation rests on (its id)."""
    revoked: str | None = None
    """When the operator revoked it (UTC), as the entry says; the position counts."""
    by: str = "operator"
    """Whose word it is: the ledger's `operator` (on its host, or an operator token), or
    a `reviewer` (a reviewer token, on the reviewer's dispute it names), which counts
    for a pass only where the plan says so (`[review] revoke_pass`)."""
    revoked_by: str | None = None
    """The token holder who revoked it over HTTP (None: on the ledger's host)."""
    signer: str | None = None
    """The key id that signed it (`ledger.evidence.signed_revocation`); None: an
    earlier release's revocation, unsigned."""
    problem: str | None = None
    """Why it counts for nothing (its signature does not verify, or its signer may not
    assert it); None: it counts as the judge weighs it."""

    @property
    def unsigned(self) -> bool:
        """Of the earlier, unsigned form (accepted as before, said to be so)."""
        return self.signer is None and self.problem is None


def first_revocations(revs: Iterable[ReceiptRevocation]) -> dict[str, ReceiptRevocation]:
    """Per receipt, of its revocations in log order, the first that counts (its
    signature checked), else the first: a forged one neither voids a receipt nor hides
    a genuine one after it, and is still shown where it is all there is."""
    out: dict[str, ReceiptRevocation] = {}
    for rev in revs:
        held = out.get(rev.receipt)
        if held is None or (held.problem is not None and rev.problem is None):
            out[rev.receipt] = rev
    return out


class LoggedEntry:
    """A log entry as stored; each parsed view is computed once, on first use.

    Immutable, compared by its stored fields. Written out rather than a
    dataclass: `ledger verify BUNDLE` reads entries, and importing
    `dataclasses` (with `inspect`) would be a fifth of its start-up.
    """

    seq: int
    kind: str
    """receipt | review | key | revocation"""
    entry_id: str
    body: bytes
    logged_at: str | None
    stored_leaf_hash: str | None
    """The leaf hash stored beside the body (the audit compares it with the body's)."""
    trusted: bool
    """Bytes this ledger verified at ingest, read back to answer a question: parsed
    without the untrusted-input bounds (`ledger.evidence.limits`). A body changed behind
    the ledger's back still fails to parse, or fails the digest check, and
    `ledger audit` (which reads entries untrusted) names it. Not compared."""

    def __init__(
        self,
        seq: int,
        kind: str,
        entry_id: str,
        body: bytes,
        logged_at: str | None = None,
        stored_leaf_hash: str | None = None,
        trusted: bool = False,
    ) -> None:
        # Set through __dict__, as the cached views are: __setattr__ refuses.
        self.__dict__.update(
            seq=seq,
            kind=kind,
            entry_id=entry_id,
            body=body,
            logged_at=logged_at,
            stored_leaf_hash=stored_leaf_hash,
            trusted=trusted,
        )

    def _key(self) -> tuple[int, str, str, bytes, str | None, str | None]:
        return (
            self.seq,
            self.kind,
            self.entry_id,
            self.body,
            self.logged_at,
            self.stored_leaf_hash,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LoggedEntry):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"LoggedEntry(seq={self.seq!r}, kind={self.kind!r}, entry_id={self.entry_id!r}, "
            f"body={self.body!r}, logged_at={self.logged_at!r}, "
            f"stored_leaf_hash={self.stored_leaf_hash!r}, trusted={self.trusted!r})"
        )

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r} (a LoggedEntry is immutable)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r} (a LoggedEntry is immutable)")

    @classmethod
    def of(cls, row: Any, *, trusted: bool = False) -> LoggedEntry:
        """From a stored row (anything with seq, kind, entry_id, body, logged_at, leaf_hash)."""
        # surrogateescape: a stored byte that is not UTF-8 (see the SQLite text
        # factory in ledger/store/store.py) comes back as itself, so the audit
        # names the entry whose leaf hash it breaks instead of aborting.
        body = (
            row.body.encode("utf-8", "surrogateescape")
            if isinstance(row.body, str)
            else bytes(row.body)
        )
        return cls(
            int(row.seq),
            str(row.kind),
            str(row.entry_id),
            body,
            row.logged_at,
            row.leaf_hash,
            trusted,
        )

    @property
    def text(self) -> str:
        return self.body.decode()

    @cached_property
    def document(self) -> Any:
        """The body as JSON; RefusedError when it is not."""
        if self.trusted:
            return _stored_json(self.body, "body is not JSON")
        try:
            return load_json(self.body, "body")
        except InputError:
            raise RefusedError("body is not JSON") from None

    @cached_property
    def envelope(self) -> dsse.ReadEnvelope:
        data = (
            _stored_json(self.body, "entry is not a DSSE envelope")
            if self.trusted
            else self.document
        )
        try:
            return dsse.read_envelope(data)
        except RefusedError:
            raise RefusedError("entry is not a DSSE envelope") from None

    @cached_property
    def payload(self) -> bytes:
        """The signed payload bytes, exactly as carried in the envelope."""
        return dsse.decode_payload(self.envelope)

    @cached_property
    def payload_document(self) -> Any:
        """The payload as JSON, as it was signed (for display; `statement` validates)."""
        if self.trusted:
            return _stored_json(self.payload, "payload is not JSON")
        try:
            return load_json(self.payload, "payload")
        except InputError:
            raise RefusedError("payload is not JSON") from None

    @cached_property
    def statement(self) -> Statement:
        from pydantic import ValidationError

        from ledger.evidence.errors import first_validation_error
        from ledger.evidence.models import QualificationStatement, ReviewStatement
        from ledger.evidence.statement import parse_statement

        model: type[QualificationStatement] | type[ReviewStatement] | None = None
        if self.trusted and self.kind == "receipt":
            model = QualificationStatement
        elif self.trusted and self.kind == "review":
            model = ReviewStatement
        if model is None:
            return parse_statement(self.payload)
        try:
            # One pass of pydantic's JSON reader over bytes ingest read strictly.
            return model.model_validate_json(self.payload)
        except ValidationError as e:
            why = first_validation_error(e)
            raise RefusedError(f"malformed in-toto statement: {why}") from None

    @cached_property
    def payload_matches_id(self) -> bool:
        """The entry id is the digest of the payload it carries (cheap; no signature)."""
        return receipt_id(self.payload) == self.entry_id

    @property
    def receipt(self) -> QualificationStatement:
        from ledger.evidence.models import QualificationStatement

        stmt = self.statement
        if not isinstance(stmt, QualificationStatement):
            raise RefusedError(f"entry {self.seq} is a review, not a receipt")
        return stmt

    @property
    def review(self) -> ReviewStatement:
        from ledger.evidence.models import ReviewStatement

        stmt = self.statement
        if not isinstance(stmt, ReviewStatement):
            raise RefusedError(f"entry {self.seq} is a receipt, not a review")
        return stmt

    @cached_property
    def signer(self) -> str:
        """Key id of the first signature (the one that gave the entry its role)."""
        return self.envelope.signatures[0].keyid

    @cached_property
    def signers(self) -> tuple[str, ...]:
        return tuple(s.keyid for s in self.envelope.signatures)

    def key(self) -> KeyInfo:
        """A key entry's registered key; RefusedError when the body is not one."""
        data = self.document
        try:
            pub = Ed25519PublicKey.from_public_bytes(
                base64.b64decode(data["public_key"], validate=True)
            )
            name, role, keyid = data["name"], data["role"], data["keyid"]
        except (KeyError, TypeError, ValueError, binascii.Error):
            raise RefusedError("not a key entry") from None
        if data.get("kind") != "key" or not all(isinstance(v, str) for v in (name, role, keyid)):
            raise RefusedError("not a key entry")
        if key_id(pub) != keyid:
            raise RefusedError("key id is not the digest of the key")
        by = data.get("registered_by")
        return KeyInfo(
            keyid, name, role, pub, self.seq, registered_by=by if isinstance(by, str) else None
        )

    @cached_property
    def signed_revocation(self) -> tuple[dict[str, Any], dsse.ReadEnvelope] | None:
        """A signed revocation's (document it asserts, envelope); None for one of the
        earlier, unsigned form; RefusedError where the signed form does not read."""
        return read_signed(self.document)

    @property
    def revocation_doc(self) -> Any:
        """A revocation entry's document: the signed payload, or the body itself for
        the earlier form; None where the signed form does not read."""
        try:
            signed = self.signed_revocation
        except RefusedError:
            return None
        return self.document if signed is None else signed[0]

    @property
    def revokes_receipt(self) -> bool:
        """A revocation of one receipt (not of a key): its document names `receipt`."""
        data = self.revocation_doc if self.kind == "revocation" else None
        return isinstance(data, dict) and "receipt" in data and "keyid" not in data

    def revocation(self) -> tuple[str, str]:
        """A key revocation entry's (key id, reason), signed or not: whether it counts
        is `ledger.evidence.signed_revocation.check`'s."""
        data = self.revocation_doc
        if not isinstance(data, dict) or data.get("kind") != "revocation":
            raise RefusedError("not a revocation entry")
        keyid, reason = data.get("keyid"), data.get("reason")
        if not isinstance(keyid, str) or not isinstance(reason, str):
            raise RefusedError("not a revocation entry")
        return keyid, reason

    def revocation_signature(self, keys: Mapping[str, KeyInfo]) -> Signature:
        """This revocation's signature checked against `keys` (the log's registry)."""
        try:
            parsed = self.signed_revocation
        except RefusedError as e:
            return Signature(None, f"its signature does not read ({e.reason()})")
        return check(self.seq, self.document, keys, parsed)

    def receipt_revocation(self, keys: Mapping[str, KeyInfo] | None = None) -> ReceiptRevocation:
        """A receipt revocation entry's receipt, reason and the review it rests on. A
        signed one counts for nothing until its signature is checked against `keys`
        (without them: `problem` says it was not)."""
        rev = self._receipt_revocation()
        if keys is None or rev.unsigned:
            return rev
        sig = self.revocation_signature(keys)
        return rev._replace(signer=sig.signer, problem=sig.problem)

    def _receipt_revocation(self) -> ReceiptRevocation:
        data = self.revocation_doc
        if not isinstance(data, dict) or data.get("kind") != "revocation":
            raise RefusedError("not a revocation entry")
        rid, reason, review = data.get("receipt"), data.get("reason"), data.get("review")
        if not isinstance(rid, str) or not rid.startswith("sha256:") or "keyid" in data:
            raise RefusedError("not a receipt revocation entry")
        if not isinstance(reason, str) or not (review is None or isinstance(review, str)):
            raise RefusedError("not a receipt revocation entry")
        when, holder = data.get("revoked"), data.get("revoked_by")
        return ReceiptRevocation(
            self.seq,
            rid,
            reason,
            review,
            when if isinstance(when, str) else None,
            # Anything but a reviewer's is the operator's, as before the field existed.
            "reviewer" if data.get("by") == "reviewer" else "operator",
            holder if isinstance(holder, str) else None,
            *self._unchecked(),
        )

    def _unchecked(self) -> tuple[str | None, str | None]:
        signed = self.signed_revocation
        return (None, None) if signed is None else (signed[1].signatures[0].keyid, NOT_CHECKED)

    def body_id(self) -> str:
        """The id a key or revocation entry must have: the digest of its body."""
        return receipt_id(self.body)


def _stored_json(raw: bytes, reason: str) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise RefusedError(reason) from None


def envelope_body(env: dsse.EnvelopeLike) -> bytes:
    """The log entry bytes of an envelope: its canonical JSON (payload bytes untouched)."""
    return canonical_bytes(dsse.envelope_json(env))


def key_body(
    keyid: str, name: str, role: str, public: Ed25519PublicKey, registered_by: str | None = None
) -> bytes:
    """A key entry; `registered_by` names the token holder who registered it over
    HTTP (absent for keys registered on the ledger's own host)."""
    doc = {
        "kind": "key",
        "keyid": keyid,
        "name": name,
        "role": role,
        "public_key": base64.b64encode(raw_public(public)).decode(),
    }
    if registered_by is not None:
        doc["registered_by"] = registered_by
    return canonical_bytes(doc)


def revocation_body(keyid: str, reason: str, when: str, revoked_by: str | None = None) -> bytes:
    doc = {"kind": "revocation", "keyid": keyid, "reason": reason, "revoked": when}
    if revoked_by is not None:
        doc["revoked_by"] = revoked_by
    return canonical_bytes(doc)


def receipt_revocation_body(
    receipt: str,
    reason: str,
    when: str,
    review: str | None = None,
    by: str = "operator",
    revoked_by: str | None = None,
) -> bytes:
    """A revocation of one receipt: the key revocation's entry kind, naming `receipt`
    instead of `keyid`; `review` names the independent review a counterexample's
    revocation needs (`ledger.write.revoke`); `by` is written only for a reviewer's
    (the operator's reads as before), `revoked_by` only over HTTP."""
    doc = {"kind": "revocation", "receipt": receipt, "reason": reason, "revoked": when}
    if review is not None:
        doc["review"] = review
    if by != "operator":
        doc["by"] = by
    if revoked_by is not None:
        doc["revoked_by"] = revoked_by
    return canonical_bytes(doc)
