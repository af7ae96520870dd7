"""A claim's figure per revision: the base branch's commits (oldest first), then
the PR's heads in the order they were recorded, one point per revision (its
newest receipt of the claim). A receipt a later receipt of the revision names as
superseded stays beside the point with its figure: a supersession measures
nothing, and the figure it replaced is evidence still (whether the supersession
lifts it is `ledger status`'s to say)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ledger.store.store import Store
from ledger.trend.figures import Figure, figure_of, least_of

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
    superseded: tuple[Point, ...] = ()
    """Earlier receipts of the revision that a later one names as superseded, oldest first."""
    superseded_by: str | None = None
    """On a superseded receipt: the receipt that named it."""
    least: Figure | None = None
    """Admission's least measured/predicted (how loose the estimate is), beside its
    worst; None for other checks."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "commit": self.commit,
            "where": self.where,
            "receipt": self.receipt,
            "outcome": self.outcome,
            "recorded": self.recorded,
            "figure": self.figure.to_json() if self.figure else None,
        }
        if self.least is not None:
            out["least"] = self.least.to_json()
        if self.superseded_by is not None:
            out["superseded_by"] = self.superseded_by
        else:
            out["superseded"] = [p.to_json() for p in self.superseded]
        return out


@dataclass
class Trend:
    claim: str
    points: list[Point] = field(default_factory=list)
    base_asked: int = 0
    """Base commits looked at (those without a receipt of the claim have no point)."""

    @property
    def name(self) -> str | None:
        every = [q for p in self.points for q in (p, *p.superseded)]
        return next((p.figure.name for p in every if p.figure), None)

    @property
    def base_least(self) -> Figure | None:
        """The newest base commit's least measured/predicted: what a head's is compared
        with."""
        return next((p.least for p in reversed(self.points) if p.where == "base"), None)

    @property
    def base_with_receipts(self) -> int:
        """Base commits with a receipt of the claim (each has one point)."""
        return sum(p.where == "base" for p in self.points)

    def to_json(self) -> dict[str, Any]:
        return {
            "claim": self.claim,
            "figure": self.name,
            "base_commits_asked": self.base_asked,
            "base_commits_with_receipts": self.base_with_receipts,
            "points": [p.to_json() for p in self.points],
        }


def _per_commit(entries: list[Any]) -> dict[str, list[Any]]:
    """Each commit's receipts in log order (the dict in the order commits first appear)."""
    out: dict[str, list[Any]] = {}
    for e in entries:
        out.setdefault(e.payload_document["predicate"]["source"]["commit"], []).append(e)
    return out


def _point(e: Any, where: str, superseded_by: str | None = None) -> Point:
    p = e.payload_document["predicate"]
    return Point(
        commit=p["source"]["commit"],
        where=where,
        receipt=e.entry_id,
        outcome=p["outcome"],
        recorded=str((p.get("runner") or {}).get("finished") or ""),
        figure=figure_of(p),
        superseded_by=superseded_by,
        least=least_of(p),
    )


def _revision(receipts: list[Any], where: str) -> Point:
    """The revision's point: its newest receipt (a later receipt of a revision replaces
    an earlier one), with the earlier ones that a later one names as superseded."""
    by: dict[str, str] = {}
    for e in receipts:
        for s in e.payload_document["predicate"].get("supersedes") or []:
            if isinstance(s, dict) and isinstance(s.get("id"), str):
                by.setdefault(s["id"], e.entry_id)
    newest = receipts[-1]
    gone = tuple(_point(e, "superseded", by[e.entry_id]) for e in receipts[:-1] if e.entry_id in by)
    return replace(_point(newest, where), superseded=gone)


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
        found = _per_commit(entries(commits=list(base_commits)))
        for c in reversed(base_commits):
            if c in found:
                out.points.append(_revision(found[c], "base"))
    if pr is not None:
        heads = _per_commit(entries(pr=pr))
        for i, es in enumerate(heads.values(), 1):
            out.points.append(_revision(es, f"PR #{pr} head {i}"))
    return out
