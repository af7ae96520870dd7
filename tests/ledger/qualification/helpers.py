"""Asking the engine about one claim with a one-claim plan."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ledger.qualification import (
    ClaimStatus,
    ReceiptEvidence,
    ReviewEvidence,
    Revision,
    StatusReport,
    evaluate,
)
from ledger.qualification.plan import ClaimSpec, PackageSpec, Plan

from .factories import CHECK, CLAIM, H200, PACKAGE_PATHS, revision


def plan(**claim: Any) -> Plan:
    """A plan with one claim (defaults: the admission claim at the H200 scope)."""
    spec = {"name": CLAIM, "check": CHECK, "scope": dict(H200), **claim}
    return Plan(claims=(ClaimSpec(**spec),), package=PackageSpec(paths=tuple(PACKAGE_PATHS)))


def report(
    receipts: Sequence[ReceiptEvidence],
    review_log: Sequence[ReviewEvidence] = (),
    *,
    rev: Revision | None = None,
    query: dict[str, str | int] | None = None,
    **claim: Any,
) -> StatusReport:
    return evaluate(
        plan=plan(**claim),
        revision=rev or revision(),
        receipts=receipts,
        reviews=review_log,
        query_scope=query,
    )


def status(
    receipts: Sequence[ReceiptEvidence],
    review_log: Sequence[ReviewEvidence] = (),
    *,
    rev: Revision | None = None,
    query: dict[str, str | int] | None = None,
    **claim: Any,
) -> ClaimStatus:
    """The claim's row at its required scope."""
    return report(receipts, review_log, rev=rev, query=query, **claim).at_required_scope(CLAIM)


def rules_of(row: ClaimStatus) -> set[str]:
    return {r.rule for r in row.reasons}


def why(row: ClaimStatus) -> str:
    return "\n".join(str(r) for r in row.reasons)
