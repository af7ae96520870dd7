"""The answer to `status`: per claim and scope, a state and why."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ledger.qualification.attribution import Attribution
from ledger.qualification.evidence import ReceiptEvidence, Revision
from ledger.qualification.states import STATES, ClaimStatus, ScopeRole, State

if TYPE_CHECKING:
    from ledger.qualification.verdict import Verdict

__all__ = ["STATES", "ClaimStatus", "ScopeRole", "State", "StatusReport"]


@dataclass(frozen=True, slots=True)
class StatusReport:
    """Every asked claim's state at its required scope and at each evidence scope."""

    subject: Revision
    qualified: bool
    """Every required asked claim is qualified at its required scope."""
    claims: tuple[ClaimStatus, ...]
    query_scope: Mapping[str, str | int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    """What was judged: which head (fetched or local) and which plan governs."""
    evidence: tuple[ReceiptEvidence, ...] = ()
    """The receipts the engine was given (the verdict says what each means here)."""
    problems: tuple[str, ...] = ()
    """Logged entries that bear on the answer but cannot be read (named, never skipped)."""
    governed: bool = True
    """False where no governing plan is known and no claim was named: nothing was judged."""
    ungoverned: str = "no governing plan recorded"
    """Why no plan governs, where none does (the verdict's headline says it)."""
    baselines: tuple[Attribution, ...] = ()
    """Per blocking claim, whose failure it is, beside the commit the head branched from
    (`ledger.qualification.attribution`): it explains, it never unblocks."""
    verdict: Verdict | None = None
    """The verdict the judge decided with the rest (`ledger.qualification.judge`); None
    for the engine's own report, whose verdict is read from it where it is rendered."""

    def at_required_scope(self, claim: str) -> ClaimStatus:
        """The row that decides `claim`; KeyError if it was not asked."""
        for row in self.claims:
            if row.claim == claim and row.scope_role == "required":
                return row
        raise KeyError(claim)

    def rows(self, claim: str) -> tuple[ClaimStatus, ...]:
        return tuple(row for row in self.claims if row.claim == claim)

    def to_json(self) -> dict[str, Any]:
        from ledger.qualification.meanings import verdict_of

        return {
            "subject": self.subject.to_json(),
            "qualified": self.qualified,
            "scope": dict(self.query_scope),
            "judged": list(self.notes),
            "claims": [row.to_json() for row in self.claims],
            "verdict": (self.verdict or verdict_of(self)).to_json(),
            "problems": list(self.problems),
            "governed": self.governed,
        }
