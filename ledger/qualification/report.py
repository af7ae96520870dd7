"""The answer to `status`: per claim and scope, a state and why."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from ledger.qualification.evidence import Revision, short_id
from ledger.qualification.rules import Reason, Via
from ledger.qualification.scope import format_scope

__all__ = ["STATES", "ClaimStatus", "ScopeRole", "State", "StatusReport", "render_table"]

State: TypeAlias = Literal[
    "qualified", "failed", "inconclusive", "not-run", "stale", "disputed", "unverified"
]
STATES: tuple[State, ...] = (
    "qualified",
    "failed",
    "disputed",
    "unverified",
    "inconclusive",
    "stale",
    "not-run",
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


@dataclass(frozen=True, slots=True)
class StatusReport:
    """Every asked claim's state at its required scope and at each evidence scope."""

    subject: Revision
    qualified: bool
    """Every required asked claim is qualified at its required scope."""
    claims: tuple[ClaimStatus, ...]
    query_scope: Mapping[str, str | int] = field(default_factory=dict)

    def at_required_scope(self, claim: str) -> ClaimStatus:
        """The row that decides `claim`; KeyError if it was not asked."""
        for row in self.claims:
            if row.claim == claim and row.scope_role == "required":
                return row
        raise KeyError(claim)

    def rows(self, claim: str) -> tuple[ClaimStatus, ...]:
        return tuple(row for row in self.claims if row.claim == claim)

    def to_json(self) -> dict[str, Any]:
        return {
            "subject": self.subject.to_json(),
            "qualified": self.qualified,
            "scope": dict(self.query_scope),
            "claims": [row.to_json() for row in self.claims],
        }


_HEADER = ("CLAIM", "SCOPE", "STATE", "VIA", "RECEIPTS", "WHY")


def render_table(report: StatusReport) -> str:
    """Plain-text table for people: claim x scope -> state, receipts, via, reasons.

    Rows whose scope starts with `>` are the narrower scopes evidence was
    recorded at, listed under the claim's required scope.
    """
    s = report.subject
    head = f"PR #{s.pr} head {s.commit[:12]}" if s.pr is not None else f"commit {s.commit[:12]}"
    verdict = "qualified" if report.qualified else "not qualified"
    lines = [f"{s.repo} {head} (tree {s.tree[:12]}): {verdict}"]
    if report.query_scope:
        lines.append(f"asked at scope {format_scope(report.query_scope)}")
    table: list[tuple[list[str], ...]] = [tuple([h] for h in _HEADER)]
    for row in report.claims:
        if row.scope_role == "required":
            name = row.claim if row.required else f"{row.claim} (optional)"
            scope = format_scope(row.scope)
        else:
            name, scope = "", "> " + format_scope(row.scope)
        table.append(
            (
                [name],
                _wrap(scope),
                [row.state],
                [row.via or "-"],
                [short_id(r) for r in row.receipts] or ["-"],
                [str(r) for r in row.reasons] or [""],
            )
        )
    widths = [max(len(line) for cells in table for line in cells[i]) for i in range(len(_HEADER))]
    for cells in table:
        height = max(len(c) for c in cells)
        for k in range(height):
            parts = [c[k] if k < len(c) else "" for c in cells]
            text = "  ".join(p.ljust(w) for p, w in zip(parts, widths, strict=True))
            lines.append(text.rstrip())
    return "\n".join(lines) + "\n"


def _wrap(scope: str, width: int = 64) -> list[str]:
    """A scope cell over several lines, long digests shortened (JSON keeps them whole)."""
    lines: list[str] = []
    for part in scope.split(","):
        key, sep, value = part.partition("=")
        if sep and len(value) > 16 and all(c in "0123456789abcdef" for c in value):
            part = f"{key}={value[:12]}..."
        if lines and len(lines[-1]) + 1 + len(part) <= width:
            lines[-1] += "," + part
        else:
            lines.append(part if not lines else "  " + part)
    return lines
