"""The states a claim can be in, and one claim's state at one scope.

Below both the report (`report.py`, every asked claim's row) and the verdict
(`verdict.py`, its model; `meanings.py`, what the rows mean for people), so the
verdict is read from rows without importing the report that renders it into its
JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from ledger.qualification.rules import Reason, Via

__all__ = ["STATES", "ClaimStatus", "ScopeRole", "State"]

State: TypeAlias = Literal[
    "qualified",
    "failed",
    "inconclusive",
    "not-run",
    "infra-error",
    "stale",
    "disputed",
    "needs-review",
    "unverified",
    "not-applicable",
]
STATES: tuple[State, ...] = (
    "qualified",
    "failed",
    "disputed",
    "needs-review",
    "unverified",
    "inconclusive",
    "infra-error",
    "stale",
    "not-run",
    "not-applicable",
)
ScopeRole: TypeAlias = Literal["required", "evidence"]


@dataclass(frozen=True, slots=True)
class ClaimStatus:
    """The state of one claim at one scope.

    `scope_role` is "required" for the scope the claim is asked at (plan scope
    plus query scope; it alone decides `qualified`) and "evidence" for each
    other, narrower scope that evidence was recorded at.
    """

    claim: str
    scope: Mapping[str, str | int]
    scope_role: ScopeRole
    state: State
    receipts: tuple[str, ...]
    """Full ids of the receipts that decide the state."""
    via: Via | None
    """The most direct carry-over among the deciding receipts."""
    reasons: tuple[Reason, ...]
    required: bool
    in_plan: bool
    check: str | None = None
    """The check the plan names for the claim (None where the plan does not name it):
    what says which command records its evidence."""

    def to_json(self) -> dict[str, Any]:
        return {
            "claim": self.claim,
            "scope": dict(self.scope),
            "scope_role": self.scope_role,
            "state": self.state,
            "receipts": list(self.receipts),
            "via": self.via,
            "reasons": [str(r) for r in self.reasons],
            "required": self.required,
            "in_plan": self.in_plan,
        }
