"""Verification: envelopes, bundles offline, and the one report they produce.

Store-free: `ledger verify FILE` imports this package and no database code,
and builds no pydantic model for a valid bundle (`ledger.evidence.shape`).
`ledger.verify.logged` (verify an id in a ledger) reads the store.
"""

from __future__ import annotations

from ledger.verify.bundle import verify_bundle
from ledger.verify.envelope import Verified, verify_entry, verify_envelope
from ledger.verify.report import LogState, VerificationReport

__all__ = [
    "LogState",
    "VerificationReport",
    "Verified",
    "verify_bundle",
    "verify_entry",
    "verify_envelope",
]
