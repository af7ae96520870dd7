"""Verify one envelope: signatures, key status, role, statement."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ledger import dsse
from ledger.canonical import receipt_id
from ledger.entry import LoggedEntry
from ledger.errors import VerificationError
from ledger.keys import KeyInfo
from ledger.models import Envelope
from ledger.statement import ROLE_FOR, Statement, kind_of
from ledger.verify.strict import check_signers, strict_statement

__all__ = ["Verified", "verify_entry", "verify_envelope"]


@dataclass(frozen=True, slots=True)
class Verified:
    """What verification accepted: the statement, its exact bytes and its signer."""

    id: str
    kind: str
    """receipt | review"""
    envelope: Envelope
    payload: bytes
    statement: Statement
    signer: str
    signers: tuple[str, ...] = ()
    """Every key that signed (sorted); `signer` is the first of them."""


def verify_envelope(
    env: Envelope, keys: Mapping[str, KeyInfo], *, at_seq: int | None = None
) -> Verified:
    """Signature, key status, role and statement checks of one envelope.

    `at_seq` is the log position the entry has (audit) or would get (ingest):
    a key revoked before that position does not count.
    """
    payload, accepted = dsse.verify(env, {k: v.public for k, v in keys.items()})
    stmt = strict_statement(payload)
    roles = {k: (v.name, v.role, v.revoked_seq, v.revoked_reason) for k, v in keys.items()}
    signers = check_signers(
        accepted,
        [s.keyid for s in env.signatures],
        roles,
        ROLE_FOR[stmt.predicateType],
        kind_of(stmt),
        at_seq,
    )
    signer = signers[0]
    return Verified(
        id=receipt_id(payload),
        kind=kind_of(stmt),
        envelope=env,
        payload=payload,
        statement=stmt,
        signer=signer,
        signers=signers,
    )


def verify_entry(entry: LoggedEntry, keys: Mapping[str, KeyInfo]) -> Verified:
    """A logged receipt or review, judged by the keys as of its own log position."""
    v = verify_envelope(entry.envelope, keys, at_seq=entry.seq)
    if v.id != entry.entry_id:
        raise VerificationError(f"entry {entry.seq}: id differs from its payload digest")
    return v
