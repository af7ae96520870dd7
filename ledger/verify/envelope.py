"""Verify one envelope: signatures, key status, role, statement."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ledger.evidence import dsse
from ledger.evidence.canonical import receipt_id
from ledger.evidence.errors import VerificationError
from ledger.evidence.keys import KeyInfo
from ledger.evidence.kinds import KIND_FOR, ROLE_FOR
from ledger.verify.strict import check_signers, strict_document

if TYPE_CHECKING:
    from ledger.evidence.entry import LoggedEntry
    from ledger.evidence.statement import Statement

__all__ = ["Verified", "verify_entry", "verify_envelope"]


class Verified:
    """What verification accepted: the statement, its exact bytes and its signer.

    A plain class, not a dataclass: offline verification starts without
    `dataclasses`, and builds no statement model.
    """

    __slots__ = ("_statement", "document", "envelope", "id", "kind", "payload", "signer", "signers")

    def __init__(
        self,
        *,
        id: str,
        kind: str,
        envelope: dsse.EnvelopeLike,
        payload: bytes,
        document: dict[str, Any],
        signer: str,
        signers: tuple[str, ...] = (),
    ) -> None:
        self.id = id
        self.kind = kind
        """receipt | review"""
        self.envelope = envelope
        self.payload = payload
        self.document = document
        """The statement as its decoded JSON, read strictly (`ledger.verify.strict`)."""
        self.signer = signer
        self.signers = signers
        """Every key that signed (sorted); `signer` is the first of them."""
        self._statement: Statement | None = None

    @property
    def statement(self) -> Statement:
        """The statement's pydantic model, built on first use (ingest and audit use
        it; verifying a bundle does not). The payload was accepted already."""
        if self._statement is None:
            from ledger.evidence.statement import statement_model

            model = statement_model(self.document)
            self._statement = model.model_validate_json(self.payload, strict=True)
        return self._statement


def verify_envelope(
    env: dsse.EnvelopeLike, keys: Mapping[str, KeyInfo], *, at_seq: int | None = None
) -> Verified:
    """Signature, key status, role and statement checks of one envelope.

    `at_seq` is the log position the entry has (audit) or would get (ingest):
    a key revoked before that position does not count.
    """
    payload, accepted = dsse.verify(env, {k: v.public for k, v in keys.items()})
    doc = strict_document(payload)
    ptype = doc["predicateType"]
    roles = {k: (v.name, v.role, v.revoked_seq, v.revoked_reason) for k, v in keys.items()}
    signers = check_signers(
        accepted,
        [s.keyid for s in env.signatures],
        roles,
        ROLE_FOR[ptype],
        KIND_FOR[ptype],
        at_seq,
    )
    return Verified(
        id=receipt_id(payload),
        kind=KIND_FOR[ptype],
        envelope=env,
        payload=payload,
        document=doc,
        signer=signers[0],
        signers=signers,
    )


def verify_entry(entry: LoggedEntry, keys: Mapping[str, KeyInfo]) -> Verified:
    """A logged receipt or review, judged by the keys as of its own log position."""
    v = verify_envelope(entry.envelope, keys, at_seq=entry.seq)
    if v.id != entry.entry_id:
        raise VerificationError(f"entry {entry.seq}: id differs from its payload digest")
    return v
