"""A claim's figure per revision: the base branch's commits (oldest first), then
the PR's heads in the order they were recorded, one point per revision and scope
(its newest receipt of the claim there); each head's change in % against the
newest base point of its scope (`Trend.change`). A receipt a later receipt of
the revision names as superseded stays beside the point with its figure: a
supersession measures nothing, and the figure it replaced is evidence still
(whether the supersession lifts it is `ledger status`'s to say). A receipt its
revocation voids (by the judge's rule, weighed as `ledger show` weighs it: the caller's
`void`) is no point at all: from its revocation on it says nothing, so it is neither
drawn nor compared with, and the trend lists it under `void` with why."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ledger.qualification.deciding import bound_of, figure_by_key
from ledger.qualification.figures import Figure, figure_of, least_of, percent_text, scope_text
from ledger.store.store import Store

__all__ = [
    "Change",
    "Point",
    "Trend",
    "Void",
    "compared_scope",
    "percent_text",
    "scope_text",
    "trend",
]

CODE_FACETS = ("workload_digest",)
"""Scope facets that identify the code under test, not where it ran: a PR changes
them by design, so a head is compared with the base on every other facet."""


def compared_scope(scope: dict[str, Any]) -> dict[str, Any]:
    """The facets a head and a base receipt must share to be compared (by their text,
    as scopes compare: `gpu_count=2` is `gpu_count="2"`)."""
    return {k: str(v) for k, v in scope.items() if k not in CODE_FACETS}


def _three(x: float) -> float:
    """`x` to three significant digits, as JSON gives it (`12.3`, not 12.299999)."""
    return float(f"{x:.3g}")


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
    scope: dict[str, Any] = field(default_factory=dict)
    """The receipt's `predicate.scope`: a head is compared only with a base receipt of
    the same scope."""
    bound: float | None = None
    """Where the trend follows a named figure (`trend(figure=KEY)`): the bound this
    receipt's check judged it against (`ledger.qualification.deciding.bound_of`)."""

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
        out["scope"] = dict(self.scope)
        if self.bound is not None:
            out["bound"] = self.bound
        if self.superseded_by is not None:
            out["superseded_by"] = self.superseded_by
        else:
            out["superseded"] = [p.to_json() for p in self.superseded]
        return out


@dataclass(frozen=True)
class Void:
    """A receipt its revocation voids: no point of the series, said with why."""

    commit: str
    where: str
    receipt: str
    outcome: str
    why: str
    """The revocation in the words every surface shows (`revoked: REASON`)."""
    scope: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "commit": self.commit,
            "where": self.where,
            "receipt": self.receipt,
            "outcome": self.outcome,
            "scope": dict(self.scope),
            "why": self.why,
        }


@dataclass(frozen=True)
class Change:
    """A head's figure against the base's at the same scope: the newest base point of
    that scope that records the figure. `percent` is None where there is nothing to
    compare (`base` None) or the base's value is 0; `reason` says which."""

    head: Figure
    base: Point | None
    base_figure: Figure | None
    percent: float | None
    reason: str | None

    @property
    def text(self) -> str:
        """`+12.3 % vs base 0123456789ab (0.92x)`, else the reason."""
        if self.percent is None or self.base is None or self.base_figure is None:
            return str(self.reason)
        base = f"{self.base.commit[:12]} ({self.base_figure.text})"
        return f"{percent_text(self.percent)} vs base {base}"

    @property
    def least_text(self) -> str:
        """Admission's least ratio against the base's: a lower one is a looser estimate
        (it stays safe, so only a plan's bound fails it), said in words."""
        said = f"{self.head.name} {self.head.text}"
        if self.base_figure is None or self.base is None:
            return f"{said} ({self.reason})"
        vs = f"{said} vs {self.base_figure.text} on the base"
        if self.percent is None:
            return f"{vs} ({self.reason})"
        vs += f" ({percent_text(self.percent)})"
        if self.head.value < self.base_figure.value:
            return f"estimate looser than the base's: {vs}"
        # Tighter only up to 1: above it, the worst figure and the verdict say the
        # estimate fell short.
        if self.head.value > self.base_figure.value and self.head.value <= 1:
            return f"estimate tighter than the base's: {vs}"
        return vs

    def to_json(self) -> dict[str, Any] | None:
        if self.base is None or self.base_figure is None:
            return None
        out: dict[str, Any] = {
            "percent": None if self.percent is None else _three(self.percent),
            "text": None if self.percent is None else percent_text(self.percent),
            "value": self.head.value,
            "base_value": self.base_figure.value,
            "base_text": self.base_figure.text,
            "base_receipt": self.base.receipt,
            "base_commit": self.base.commit,
            "scope": dict(self.base.scope),
        }
        if self.reason is not None:
            out["reason"] = self.reason
        return out


@dataclass
class Trend:
    claim: str
    points: list[Point] = field(default_factory=list)
    base_asked: int = 0
    """Base commits looked at (those without a receipt of the claim have no point)."""
    key: str | None = None
    """The figure it follows by name (`ledger.qualification.deciding.KEYS`); None: each
    receipt's own figure (`figure_of`)."""
    void: list[Void] = field(default_factory=list)
    """Receipts their revocation voids: no point, each with why (in log order)."""

    @property
    def bound(self) -> float | None:
        """The bound of the figure it follows, where the newest receipt records one."""
        every = [p for p in self.points if p.bound is not None]
        return every[-1].bound if every else None

    @property
    def name(self) -> str | None:
        every = [q for p in self.points for q in (p, *p.superseded)]
        return next((p.figure.name for p in every if p.figure), None)

    @property
    def base_with_receipts(self) -> int:
        """Base commits with a receipt of the claim (a point per commit and scope)."""
        return len({p.commit for p in self.points if p.where == "base"})

    @property
    def no_base(self) -> str | None:
        """Why no head is compared with the base at all, or None."""
        if not self.base_asked:
            return "no base commit looked at"
        if not self.base_with_receipts:
            return f"no receipt of this claim on the last {self.base_asked} base commits"
        return None

    def change(self, p: Point, least: bool = False) -> Change | None:
        """`p`'s figure (or least ratio) against the newest base point of its scope that
        records it; None where `p` records none."""
        head = p.least if least else p.figure
        if head is None:
            return None
        mine = compared_scope(p.scope)
        at = [b for b in self.points if b.where == "base" and compared_scope(b.scope) == mine]
        found = [
            (b, f) for b in at if (f := b.least if least else b.figure) and f.name == head.name
        ]
        if not found:
            if self.no_base is not None:
                reason = self.no_base
            elif not at:
                reason = f"no base receipt at this scope ({scope_text(mine)})"
            else:
                reason = f"no base receipt at this scope records {head.name}"
            return Change(head, None, None, None, reason)
        base, fig = found[-1]
        if fig.value == 0:
            why = f"the base's {fig.name} is 0: no percentage of 0"
            return Change(head, base, fig, None, why)
        return Change(head, base, fig, (head.value - fig.value) / abs(fig.value) * 100, None)

    def _head_json(self, p: Point) -> dict[str, Any]:
        out = p.to_json()
        if p.where == "base":
            return out
        if "superseded" in out:
            out["superseded"] = [self._head_json(q) for q in p.superseded]
        for key, least in (("change_vs_base", False), ("least_change_vs_base", True)):
            c = self.change(p, least)
            if c is None:
                continue
            out[key] = c.to_json()
            if c.reason is not None:
                out[f"{key}_reason"] = c.reason
            if least:
                out["least_change_text"] = c.least_text
        if p.figure is None:
            out["change_vs_base"] = None
            out["change_vs_base_reason"] = "this receipt records no figure"
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "claim": self.claim,
            "figure": self.name,
            # Only a trend that follows a named figure says which, and its bound.
            **({} if self.key is None else {"figure_key": self.key, "bound": self.bound}),
            "base_commits_asked": self.base_asked,
            "base_commits_with_receipts": self.base_with_receipts,
            "no_base": self.no_base,
            "points": [self._head_json(p) for p in self.points],
            # Only where a receipt is void: a trend without one reads as it always did.
            **({"void": [v.to_json() for v in self.void]} if self.void else {}),
        }


def _per_commit(entries: list[Any]) -> dict[str, list[Any]]:
    """Each commit's receipts in log order (the dict in the order commits first appear)."""
    out: dict[str, list[Any]] = {}
    for e in entries:
        out.setdefault(e.payload_document["predicate"]["source"]["commit"], []).append(e)
    return out


def _point(e: Any, where: str, key: str | None, superseded_by: str | None = None) -> Point:
    p = e.payload_document["predicate"]
    return Point(
        commit=p["source"]["commit"],
        where=where,
        receipt=e.entry_id,
        outcome=p["outcome"],
        recorded=str((p.get("runner") or {}).get("finished") or ""),
        figure=figure_of(p) if key is None else figure_by_key(p, key),
        superseded_by=superseded_by,
        least=least_of(p),
        scope=dict(p.get("scope") or {}) if isinstance(p.get("scope"), dict) else {},
        bound=None if key is None else bound_of(p, key),
    )


def _scope_key(e: Any) -> str:
    scope = e.payload_document["predicate"].get("scope")
    return repr(sorted(scope.items())) if isinstance(scope, dict) else "[]"


def _revision(receipts: list[Any], where: str, key: str | None = None) -> list[Point]:
    """The revision's points, one per scope it was measured at (in the order each
    scope first appears): its newest receipt of that scope (a later receipt replaces
    an earlier one), with the earlier ones that a later one names as superseded (a
    supersession inherits the scope of the receipt it replaces)."""
    by: dict[str, str] = {}
    for e in receipts:
        for s in e.payload_document["predicate"].get("supersedes") or []:
            if isinstance(s, dict) and isinstance(s.get("id"), str):
                by.setdefault(s["id"], e.entry_id)
    scopes: dict[str, list[Any]] = {}
    for e in receipts:
        scopes.setdefault(_scope_key(e), []).append(e)
    out = []
    for es in scopes.values():
        newest = es[-1]
        gone = tuple(
            _point(e, "superseded", key, by[e.entry_id]) for e in es[:-1] if e.entry_id in by
        )
        out.append(replace(_point(newest, where, key), superseded=gone))
    return out


def trend(
    store: Store,
    repo_id: str,
    claim: str,
    *,
    pr: int | None,
    base_commits: Sequence[str] = (),
    figure: str | None = None,
    void: Callable[[Sequence[str]], Mapping[str, str]] | None = None,
) -> Trend:
    """The claim's figure on `base_commits` (newest first, as `git log` lists them)
    and on PR `pr`'s heads, from the receipts the store holds; ``figure``: the series
    of that figure by name (`ledger.qualification.deciding.KEYS`: a blocker's deciding one),
    with each receipt's bound, else each receipt's own figure. ``void``: of these
    receipt ids, those their revocation voids, with why (the read side's
    `read/revoked.py`, which weighs it by the plan: this room reads no plan)."""
    from ledger.identity.aliases import aliases_of

    # Receipts under the id and every earlier id `ledger repo alias` linked to it, in log
    # order, as status reads them.
    ids = [repo_id, *aliases_of(store, repo_id)]

    def entries(**key: Any) -> list[Any]:
        got = [e for i in ids for e in store.receipt_entries(i, claims=[claim], **key)]
        return sorted(got, key=lambda e: e.seq)

    out = Trend(claim, base_asked=len(base_commits), key=figure)
    found = _per_commit(entries(commits=list(base_commits))) if base_commits else {}
    heads = _per_commit(entries(pr=pr)) if pr is not None else {}
    every = [e.entry_id for es in (*found.values(), *heads.values()) for e in es]
    gone = dict(void(every)) if void is not None and every else {}
    revisions = [(found[c], "base") for c in reversed(base_commits) if c in found]
    # A head is numbered among every head recorded, its receipts void or not.
    revisions += [(es, f"PR #{pr} head {i}") for i, es in enumerate(heads.values(), 1)]
    for es, where in revisions:
        out.void += [_void(e, where, gone[e.entry_id]) for e in es if e.entry_id in gone]
        kept = [e for e in es if e.entry_id not in gone]
        if kept:
            out.points += _revision(kept, where, figure)
    return out


def _void(e: Any, where: str, why: str) -> Void:
    p = e.payload_document["predicate"]
    scope = p.get("scope")
    return Void(
        commit=p["source"]["commit"],
        where=where,
        receipt=e.entry_id,
        outcome=p["outcome"],
        why=why,
        scope=dict(scope) if isinstance(scope, dict) else {},
    )
