"""Verification: envelopes, bundles offline, and the one report they produce.

Store-free: `ledger verify FILE` imports this package and no database code,
and builds no pydantic model for a valid bundle (`ledger.evidence.shape`).
Verifying an id in the ledger that holds it reads the store: it is the
transparency room's (`ledger.transparency.logged`).
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
