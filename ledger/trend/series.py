"""A claim's figure per revision: the base branch's commits (oldest first), then
the PR's heads in the order they were recorded, one point per revision (its
newest receipt of the claim)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ledger.store.store import Store
from ledger.trend.figures import Figure, figure_of

__all__ = ["Point", "Trend", "trend"]


@dataclass(frozen=True)
class Point:
    commit: str
    where: str
    """`base` or `PR #N head k`."""
    receipt: str
    outcome: str
    recorded: str
    figure: Figure | None

    def to_json(self) -> dict[str, Any]:
        return {
            "commit": self.commit,
            "where": self.where,
            "receipt": self.receipt,
            "outcome": self.outcome,
            "recorded": self.recorded,
            "figure": self.figure.to_json() if self.figure else None,
        }


@dataclass
class Trend:
    claim: str
    points: list[Point] = field(default_factory=list)
    base_asked: int = 0
    """Base commits looked at (those without a receipt of the claim have no point)."""

    @property
    def name(self) -> str | None:
        return next((p.figure.name for p in self.points if p.figure), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "claim": self.claim,
            "figure": self.name,
            "base_commits_asked": self.base_asked,
            "points": [p.to_json() for p in self.points],
        }


def _newest_per_commit(entries: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for e in entries:  # log order: a later receipt of a revision replaces an earlier one
        out[e.payload_document["predicate"]["source"]["commit"]] = e
    return out


def _point(e: Any, where: str) -> Point:
    p = e.payload_document["predicate"]
    return Point(
        commit=p["source"]["commit"],
        where=where,
        receipt=e.entry_id,
        outcome=p["outcome"],
        recorded=str((p.get("runner") or {}).get("finished") or ""),
        figure=figure_of(p),
    )


def trend(
    store: Store, repo_id: str, claim: str, *, pr: int | None, base_commits: Sequence[str] = ()
) -> Trend:
    """The claim's figure on `base_commits` (newest first, as `git log` lists them)
    and on PR `pr`'s heads, from the receipts the store holds."""
    from ledger.identity.aliases import aliases_of

    # Receipts under the id and every earlier id `ledger repo alias` linked to it, in log
    # order, as status reads them.
    ids = [repo_id, *aliases_of(store, repo_id)]

    def entries(**key: Any) -> list[Any]:
        got = [e for i in ids for e in store.receipt_entries(i, claims=[claim], **key)]
        return sorted(got, key=lambda e: e.seq)

    out = Trend(claim, base_asked=len(base_commits))
    if base_commits:
        found = _newest_per_commit(entries(commits=list(base_commits)))
        for c in reversed(base_commits):
            if c in found:
                out.points.append(_point(found[c], "base"))
    if pr is not None:
        heads = _newest_per_commit(entries(pr=pr))
        for i, e in enumerate(heads.values(), 1):
            out.points.append(_point(e, f"PR #{pr} head {i}"))
    return out
