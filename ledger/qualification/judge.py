"""The one judge: from the evidence a question gathered to the answer every surface
renders, decided once.

The read side gathers (`Gathered`: the revision as proved, its receipts and reviews,
the plan, what was asked, the GPUs the fleet quarantines, the notes and problems of
how it was identified, the entries that did not read, and how to read the base's
receipts and the fleet's counts where a blocker needs them); `judge` decides, in this
order and nowhere else, each claim's state and why (the engine), whether anything was
judged at all (no plan and no claim named: nothing is), whose failure each blocker is
(beside the commit the head branched from), and the whole verdict with its exit code.
Nothing after it changes a state, a label or `qualified`: the terminal, `--json`,
Markdown, JUnit, the GitHub check, the web pages and the server's JSON render what it
returned.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ledger.identity.revision import Revision
from ledger.qualification.attribution import BLAMED, Attribution, attribute
from ledger.qualification.engine import evaluate
from ledger.qualification.evidence import ReceiptEvidence, ReviewEvidence
from ledger.qualification.meanings import verdict_of
from ledger.qualification.plan import Plan
from ledger.qualification.report import ClaimStatus, StatusReport
from ledger.qualification.revocation import under_plan

__all__ = ["CONFLICT", "NO_PLAN", "Gathered", "judge"]

NO_PLAN = "no governing plan recorded"
CONFLICT = "conflicting governing plans recorded"


@dataclass(frozen=True, slots=True, kw_only=True)
class Gathered:
    """Everything a status answer is decided from, read by the read side; nothing in it
    is decided yet."""

    plan: Plan | None
    """The plan that governs (None: none known)."""
    revision: Revision
    """The revision asked about, with what its checkout proved of other commits'
    workload definitions (the judge reads no git)."""
    receipts: Sequence[ReceiptEvidence]
    reviews: Sequence[ReviewEvidence]
    claims: Sequence[str] | None = None
    """The claims asked by name (None: the plan's)."""
    scope: Mapping[str, str | int] = field(default_factory=dict)
    quarantined: frozenset[str] = frozenset()
    """The GPUs the fleet quarantines under the plan's bound."""
    notes: tuple[str, ...] = ()
    """How the subject and its plan were identified, in words."""
    problems: tuple[str, ...] = ()
    """What keeps the plan unknown (conflicting plan entries)."""
    unreadable: tuple[str, ...] = ()
    """Entries that bear on the answer but do not read."""
    base: Callable[[Sequence[str], Sequence[str]], Sequence[ReceiptEvidence]] | None = None
    """The receipts of these base commits for these claims (asked only for blockers)."""
    fleet: Callable[[], Mapping[str, str]] | None = None
    """Per GPU, what the fleet counts there (asked only for a device-only label)."""
    elsewhere: Callable[[Sequence[str]], tuple[str, ...]] | None = None
    """Notes on receipts of these claims for this commit under another repository id."""


def judge(g: Gathered) -> StatusReport:
    """The answer, decided once: states, whether it was judged, whose each failure is,
    the verdict and its exit code."""
    # Whether a reviewer's revocation of a pass counts is the plan's to say.
    revoke_pass = g.plan.review.revoke_pass if g.plan is not None else "operator"
    g = dataclasses.replace(g, receipts=under_plan(g.receipts, revoke_pass))
    engine = evaluate(
        plan=g.plan,
        revision=g.revision,
        receipts=g.receipts,
        reviews=g.reviews,
        claims=list(g.claims) if g.claims else None,
        query_scope=dict(g.scope),
        quarantined=g.quarantined,
    )
    # No plan governs and no claim was named: nothing is required, and default rules
    # would be a guess. The answer judges nothing and says so (not qualified).
    governed = g.plan is not None or bool(g.claims)
    rows = engine.claims if governed else ()
    notes = g.notes + (g.elsewhere(sorted({r.claim for r in rows})) if g.elsewhere else ())
    report = StatusReport(
        subject=engine.subject,
        # An entry that should bear on the answer but cannot be read, or a plan that
        # cannot be known, leaves the answer open: named, and not qualified.
        qualified=engine.qualified and governed and not g.unreadable and not g.problems,
        claims=rows,
        query_scope=engine.query_scope,
        notes=notes,
        evidence=engine.evidence,
        problems=(*g.problems, *g.unreadable),
        governed=governed,
        ungoverned=(
            CONFLICT
            if any(p.startswith("conflicting governing plans") for p in g.problems)
            else NO_PLAN
        ),
        baselines=_baselines(g, rows, engine.evidence),
    )
    return dataclasses.replace(report, verdict=verdict_of(report))


def _baselines(
    g: Gathered, rows: Sequence[ClaimStatus], evidence: Sequence[ReceiptEvidence]
) -> tuple[Attribution, ...]:
    """Each blocking claim beside the commit its head branched from, read from the
    ledger's receipts of that commit (none asked where nothing blocks)."""
    blocking = [r for r in rows if r.scope_role == "required" and r.state in BLAMED]
    commit = g.revision.commit
    head = [r for r in evidence if r.predicate.source.commit == commit]
    bases = sorted({b for r in head if (b := r.predicate.source.base) is not None and b != commit})
    if not blocking or not bases or g.base is None:
        return ()
    revoke_pass = g.plan.review.revoke_pass if g.plan is not None else "operator"
    base = under_plan(g.base(bases, [r.claim for r in blocking]), revoke_pass)
    out = [attribute(r.claim, r.check, r.scope, head, base) for r in blocking]
    if g.fleet is not None and any(a is not None and a.label == "device-only" for a in out):
        # Only a device-only label says what the fleet counts on the device: the fleet
        # is read for it then, never for an answer that needs none.
        counts = g.fleet()
        out = [attribute(r.claim, r.check, r.scope, head, base, counts) for r in blocking]
    return tuple(a for a in out if a is not None)
