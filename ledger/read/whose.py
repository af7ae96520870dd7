"""Whose failure one receipt is, for the surfaces that show a single receipt (`ledger
show`, the receipt page): a failed or inconclusive receipt of a pull request's head
set beside the commit it branched from, as `status` sets its blockers
(`ledger.qualification.attribution`); a baseline run's receipt names the head it
judged the base for."""

from __future__ import annotations

from typing import Any

from ledger.evidence.entry import LoggedEntry
from ledger.evidence.errors import Error
from ledger.identity.revision import Revision
from ledger.qualification.attribution import BLAMED, attribute
from ledger.read.query import read_evidence
from ledger.store.store import Store

__all__ = ["BASELINE_FOR", "receipt_label"]

BASELINE_FOR = "baseline_for"
"""The runner environment's entry a baseline run's receipt names its head by."""


def receipt_label(store: Store, e: LoggedEntry) -> dict[str, Any] | None:
    """The label `status` would give this receipt's claim where it is its head's blocker
    (`Attribution.to_json`); for a baseline run's receipt, ``{"baseline_for": ...}``;
    None otherwise (a pass, a receipt without a merge-base, one that does not read)."""
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
    mine = [r for r in read_evidence(store, head, [p.claim]).receipts if r.id == e.entry_id]
    at = Revision(repo=p.source.repo, commit=base, tree="")
    found = attribute(
        p.claim, p.check.name, dict(p.scope), mine, read_evidence(store, at, [p.claim]).receipts
    )
    return found.to_json() if found is not None else None
