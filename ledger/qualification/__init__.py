"""Qualification: what the logged evidence says about a revision.

`evaluate` answers `ledger status` (per claim and scope: a state, the
receipts that decide it, the carry-over, and the named rules behind it);
`history` answers `ledger history` (every entry in log order, supersessions
marked, nothing hidden). Both work on evidence the store has already
verified and loaded; neither reads the database.
"""

from __future__ import annotations

from ledger.qualification.engine import evaluate
from ledger.qualification.evidence import ReceiptEvidence, ReviewEvidence, Revision, short_id
from ledger.qualification.history import HistoryItem, Supersession, history
from ledger.qualification.report import (
    STATES,
    ClaimStatus,
    ScopeRole,
    State,
    StatusReport,
)
from ledger.qualification.rules import RULES, Reason, Requirement, Via
from ledger.qualification.scope import Facets, covers, format_scope, merge_scopes

__all__ = [
    "RULES",
    "STATES",
    "ClaimStatus",
    "Facets",
    "HistoryItem",
    "Reason",
    "ReceiptEvidence",
    "Requirement",
    "ReviewEvidence",
    "Revision",
    "ScopeRole",
    "State",
    "StatusReport",
    "Supersession",
    "Via",
    "covers",
    "evaluate",
    "format_scope",
    "history",
    "merge_scopes",
    "short_id",
]
