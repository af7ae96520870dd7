"""The transparency log: checkpoints, inclusion and consistency proofs, bundle
export and the audit. The wire formats (Merkle tree, checkpoint notes) are
private, in `ledger._internal`."""

from __future__ import annotations

from ledger.log.audit import AuditReport, audit
from ledger.log.checkpoints import checkpoint, origin, rotate_ledger_key, verify_note
from ledger.log.export import export
from ledger.log.proofs import Inclusion, consistency, current_inclusion, inclusion

__all__ = [
    "AuditReport",
    "Inclusion",
    "audit",
    "checkpoint",
    "consistency",
    "current_inclusion",
    "export",
    "inclusion",
    "origin",
    "rotate_ledger_key",
    "verify_note",
]
