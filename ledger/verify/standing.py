"""Whether a logged receipt or review counts by a key table, without verifying its
signature again (store-free, so the write path and the read side ask alike)."""

from __future__ import annotations

from collections.abc import Mapping

from ledger.evidence.entry import LoggedEntry
from ledger.evidence.errors import Error
from ledger.evidence.keys import KeyInfo
from ledger.evidence.kinds import ROLE_FOR
from ledger.evidence.statement import kind_of
from ledger.verify.strict import check_signers

__all__ = ["standing"]


def standing(entry: LoggedEntry, keys: Mapping[str, KeyInfo]) -> str | None:
    """Why a logged receipt or review does not count, as the key table has it
    now, or None: every signer registered before the entry, of the role that
    may sign it, not revoked before it; the id the digest of the payload.

    No signature is verified again: ingest verified each one before the entry
    was written, and the append-only log keeps it so. `ledger audit` and
    `ledger verify` re-check every signature; a revocation is a fact of the
    key table, read here.
    """
    try:
        stmt = entry.statement
        if not entry.payload_matches_id:
            return f"entry {entry.seq}: id differs from its payload digest"
        signers = list(entry.signers)
        roles = {
            k: (info.name, info.role, info.revoked_seq, info.revoked_reason)
            for k in signers
            if (info := keys.get(k)) is not None and info.seq < entry.seq
        }
        check_signers(
            signers, signers, roles, ROLE_FOR[stmt.predicateType], kind_of(stmt), entry.seq
        )
    except Error as e:
        return e.reason()
    return None
