"""The log as it happened: every receipt and review in sequence order.

Nothing is hidden: a superseded statement stays, marked with what
superseded it and why, and so does a failure a later version of its check no
longer makes (superseded by the check's fix, `check_fixes`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ledger.qualification import receipt_rules, rules, supersession
from ledger.qualification.evidence import ReceiptEvidence, ReviewEvidence
from ledger.qualification.revocation import under_plan
from ledger.qualification.supersession import Effect

__all__ = ["HistoryItem", "Supersession", "history"]

_SAME_REVIEWER = "a later review of the same receipt by the same key"


@dataclass(frozen=True, slots=True)
class Supersession:
    """A later entry that names this one as replaced."""

    id: str
    seq: int
    reason: str
    effect: Effect = "effective"
    """`pending`: valid but without authority (`SUPERSESSION_PENDING`); `ignored`: invalid."""
    why: str = ""
    """The engine's sentence about this supersession (empty for reviews)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "seq": self.seq,
            "reason": self.reason,
            "effect": self.effect,
            "why": self.why,
        }


@dataclass(frozen=True, slots=True)
class HistoryItem:
    """One log entry, receipt or review, with what later entries say of it."""

    seq: int
    id: str
    kind: Literal["receipt", "review"]
    signer: str
    signer_role: str
    summary: Mapping[str, Any]
    """The entry's own facts (claim, outcome, source... or receipt, verdict, note)."""
    problems: tuple[str, ...] = ()
    """Why the entry does not count anywhere: signature, revocation, role."""
    superseded_by: tuple[Supersession, ...] = ()
    supersedes: tuple[Supersession, ...] = field(default=())
    superseded_by_fix: str | None = None
    """Where a later version of its check removed the only failure it holds: the
    sentence saying so (it counts as inconclusive; `superseded` is for receipts)."""

    @property
    def superseded(self) -> bool:
        """Replaced by a later entry with the authority to do so."""
        return any(s.effect == "effective" for s in self.superseded_by)

    @property
    def supersession_pending(self) -> bool:
        """Named as superseded without authority: it stands, pending review."""
        return not self.superseded and any(s.effect == "pending" for s in self.superseded_by)

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "id": self.id,
            "kind": self.kind,
            **self.summary,
            "signer": self.signer,
            "signer_role": self.signer_role,
            "problems": list(self.problems),
            "supersedes": [s.to_json() for s in self.supersedes],
            "superseded": self.superseded,
            "supersession_pending": self.supersession_pending,
            "superseded_by": [s.to_json() for s in self.superseded_by],
            "superseded_by_fix": self.superseded_by_fix,
        }


def history(
    receipts: Sequence[ReceiptEvidence],
    reviews: Sequence[ReviewEvidence],
    revoke_pass: str = "operator",
) -> list[HistoryItem]:
    """All entries in log order; supersessions are marked, never applied.

    Each is judged as `status` judges it (same claim, later, sound, decisive,
    covering, and with authority), so the two never disagree on whether it
    took effect; whether it counts for one revision is `status`'s to say. A
    revocation too: `revoke_pass` is the plan's `[review] revoke_pass`.
    """
    receipts = under_plan(receipts, revoke_pass)
    seq_of = {r.id: r.seq for r in receipts}
    by_id = {r.id: r for r in receipts}
    reviews_of: dict[str, list[ReviewEvidence]] = defaultdict(list)
    for v in reviews:
        reviews_of[v.receipt].append(v)
    later: dict[str, list[Supersession]] = defaultdict(list)
    for r in receipts:
        for s in r.predicate.supersedes:
            if s.id in seq_of and seq_of[s.id] < r.seq:
                j = supersession.judge(by_id[s.id], r, s.reason, reviews_of.get(r.id, []))
                later[s.id].append(Supersession(r.id, r.seq, s.reason, j.effect, str(j.reason)))
    items = [_receipt_item(r, seq_of, later[r.id]) for r in {r.id: r for r in receipts}.values()]
    items.extend(_review_items(reviews))
    return sorted(items, key=lambda item: (item.seq, item.kind, item.id))


def _receipt_item(
    r: ReceiptEvidence, seq_of: Mapping[str, int], later: list[Supersession]
) -> HistoryItem:
    p = r.predicate
    src = p.source
    problems = [str(x) for x in receipt_rules.integrity(r)]
    dirty = receipt_rules.dirty(r)
    if dirty is not None:
        problems.append(str(dirty))
    summary = {
        "claim": p.claim,
        "check": p.check.name,
        "scope": dict(p.scope),
        "outcome": p.outcome,
        "reason": p.reason,
        "observer": p.observer,
        "cleanup_complete": None if p.cleanup is None else p.cleanup.complete,
        "recorded": str(p.runner.finished),
        "source": {
            "commit": src.commit,
            "tree": src.tree,
            "pr": src.pr,
            "dirty": src.dirty,
            "package_digest": None if src.package is None else src.package.digest,
        },
    }
    supersedes = tuple(Supersession(s.id, seq_of.get(s.id, -1), s.reason) for s in p.supersedes)
    return HistoryItem(
        seq=r.seq,
        id=r.id,
        kind="receipt",
        signer=r.signer,
        signer_role=r.signer_role,
        summary=summary,
        problems=tuple(problems),
        superseded_by=tuple(sorted(later, key=lambda s: s.seq)),
        supersedes=supersedes,
        superseded_by_fix=receipt_rules.check_fix(r),
    )


def _review_items(reviews: Sequence[ReviewEvidence]) -> list[HistoryItem]:
    unique = sorted({v.id: v for v in reviews}.values(), key=lambda v: v.seq)
    # A reviewer's later review of the same receipt replaces its earlier verdict.
    replaced: dict[str, Supersession] = {}
    last: dict[tuple[str, str], ReviewEvidence] = {}
    for v in unique:
        key = (v.signer, v.receipt)
        if key in last:
            replaced[last[key].id] = Supersession(v.id, v.seq, _SAME_REVIEWER)
        last[key] = v
    items: list[HistoryItem] = []
    for v in unique:
        problems: list[str] = []
        if v.problem:
            problems.append(f"{rules.SIGNATURE}: {v.problem}")
        if v.revoked:
            problems.append(
                f"{rules.KEY_REVOKED}: logged at seq {v.seq}, after key {v.signer[:12]} was "
                f"revoked at seq {v.signer_revoked_seq}"
            )
        if v.signer_role != "reviewer":
            problems.append(f"{rules.SIGNER_ROLE}: signed by a {v.signer_role!r} key")
        items.append(
            HistoryItem(
                seq=v.seq,
                id=v.id,
                kind="review",
                signer=v.signer,
                signer_role=v.signer_role,
                summary={"receipt": v.receipt, "verdict": v.verdict, "note": v.note},
                problems=tuple(problems),
                superseded_by=(replaced[v.id],) if v.id in replaced else (),
            )
        )
    return items
