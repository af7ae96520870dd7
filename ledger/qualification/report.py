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
    "qualified",
    "failed",
    "inconclusive",
    "not-run",
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
    notes: tuple[str, ...] = ()
    """What was judged: which head (fetched or local) and which plan governs."""

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
            "judged": list(self.notes),
            "claims": [row.to_json() for row in self.claims],
        }


_HEADER = ("CLAIM / SCOPE / WHY", "STATE", "VIA", "RECEIPTS")


def render_table(report: StatusReport, *, width: int | None = None, color: bool = False) -> str:
    """The table for people: claim -> state, via, receipts, reasons.

    At most `width` columns (default: the terminal's, 80 when not a TTY).
    Scope and reasons are folded under their claim (the one column that
    wraps), so the short columns stay aligned; rows of narrower evidence
    scopes start with `>`. Digests are shortened (JSON keeps them
    whole). A qualified row lists only what qualifies it, so what other
    receipts lack never reads like a fault (`history` lists every receipt).
    """
    import io
    import os
    import shutil
    import textwrap

    from rich.console import Console
    from rich.table import Table

    from ledger.inert import inert

    if width is None:
        width = shutil.get_terminal_size((80, 24)).columns if _is_tty() else 80
    color = color and not os.environ.get("NO_COLOR")
    s = report.subject
    head = f"PR #{s.pr} head {s.commit[:12]}" if s.pr is not None else f"commit {s.commit[:12]}"
    verdict = "qualified" if report.qualified else "not qualified"
    lines = [f"{s.repo}: {verdict}", f"  {head} (tree {s.tree[:12]})"]
    lines.extend(f"  {note}" for note in report.notes)
    if report.query_scope:
        lines.append(f"asked at scope {format_scope(report.query_scope)}")
    table = Table(box=None, pad_edge=False, expand=False)
    for i, h in enumerate(_HEADER):
        # Only the first column wraps (at word boundaries); the short ones stay whole.
        table.add_column(h, overflow="fold", no_wrap=i > 0)
    for row in report.claims:
        if row.scope_role == "required":
            name = row.claim if row.required else f"{row.claim} (optional)"
            cell = "\n".join([name, *("  " + x for x in _wrap(format_scope(row.scope)))])
        else:
            first, *rest = _wrap(format_scope(row.scope))
            cell = "\n".join(["  > " + first, *("    " + x for x in rest)])
        reasons = row.reasons
        if row.state == "qualified":
            deciding = set(row.receipts)
            reasons = tuple(r for r in reasons if r.receipt is None or r.receipt in deciding)
        why = "".join(f"\n    - {r}" for r in reasons)
        table.add_row(
            cell + why,
            row.state,
            row.via or "-",
            "\n".join(short_id(r) for r in row.receipts) or "-",
        )
    buf = io.StringIO()
    console = Console(
        file=buf,
        width=width,
        force_terminal=color,
        no_color=not color,
        color_system="standard" if color else None,
        highlight=False,
        emoji=False,
        markup=False,
    )
    console.print(table, markup=False)
    body = "\n".join(line.rstrip() for line in buf.getvalue().splitlines())
    heading = [w for line in lines for w in textwrap.wrap(line, width, subsequent_indent="    ")]
    # Reasons quote signed text: nothing in it may act on the reader's terminal.
    return inert("\n".join(heading) + "\n" + body.strip("\n") + "\n")


def _is_tty() -> bool:
    import sys

    return sys.stdout.isatty()


def _wrap(scope: str, width: int = 40) -> list[str]:
    """A scope over several lines, long digests shortened (JSON keeps them whole)."""
    lines: list[str] = []
    for part in scope.split(","):
        key, sep, value = part.partition("=")
        if sep and len(value) > 16 and all(c in "0123456789abcdef" for c in value):
            part = f"{key}={value[:12]}..."
        if lines and len(lines[-1]) + 1 + len(part) <= width:
            lines[-1] += "," + part
        else:
            lines.append(part)
    return lines
