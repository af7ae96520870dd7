"""Whose failure one receipt is, for the surfaces that show a single receipt (`ledger
show`, the receipt page): a failed or inconclusive receipt of a pull request's head
set beside the commit it branched from, as `status` sets its blockers
(`ledger.qualification.attribution`); a baseline run's receipt names the head it
judged the base for."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ledger.evidence.entry import LoggedEntry
from ledger.evidence.errors import Error
from ledger.identity.revision import Revision
from ledger.qualification.attribution import BLAMED, attribute
from ledger.qualification.evidence import ReceiptEvidence

__all__ = ["BASELINE_FOR", "receipt_label"]

BASELINE_FOR = "baseline_for"
"""The runner environment's entry a baseline run's receipt names its head by."""


def receipt_label(
    e: LoggedEntry, read: Callable[[Revision, str], Sequence[ReceiptEvidence]]
) -> dict[str, Any] | None:
    """The label `status` would give this receipt's claim where it is its head's blocker
    (`Attribution.to_json`); for a baseline run's receipt, ``{"baseline_for": ...}``;
    None otherwise (a pass, a receipt without a merge-base, one that does not read).
    ``read``: the ledger's receipts of a revision for a claim, as `status` reads them."""
    try:
        p = e.receipt.predicate
    except Error:
        return None
    judged_for = p.runner.environment.get(BASELINE_FOR)
    if judged_for:
        return {
            BASELINE_FOR: judged_for,
            "text": f"a baseline run: the base judged for {judged_for}",
        }
    base = p.source.base
    if p.outcome not in BLAMED or base is None or base == p.source.commit:
        return None
    head = Revision(repo=p.source.repo, commit=p.source.commit, tree=p.source.tree)
    mine = [r for r in read(head, p.claim) if r.id == e.entry_id]
    at = Revision(repo=p.source.repo, commit=base, tree="")
    found = attribute(p.claim, p.check.name, dict(p.scope), mine, read(at, p.claim))
    return found.to_json() if found is not None else None
