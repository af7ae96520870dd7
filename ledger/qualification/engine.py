"""Which claims are qualified for a revision, at which scope, on what evidence.

For each asked claim and scope the engine sorts the covering receipts into
counterexamples, qualifying passes, disputed passes, passes or receipts that
do not hold (unverified), inconclusive evidence and stale evidence; the first
non-empty group, in that order, names the state. Precedence is what makes
the answer safe: a counterexample outweighs any number of passes, and
nothing that fails a requirement can lift a claim to qualified.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from ledger.evidence.errors import InputError
from ledger.qualification import carry_rules, pass_rules, receipt_rules, rules, supersession
from ledger.qualification.evidence import ReceiptEvidence, ReviewEvidence, Revision, short_id
from ledger.qualification.plan import CarryOver, Plan
from ledger.qualification.report import ClaimStatus, ScopeRole, State, StatusReport
from ledger.qualification.reviews import ReviewTally
from ledger.qualification.rules import Reason, Requirement, Via
from ledger.qualification.scope import covers, format_scope, merge_scopes, scope_key

__all__ = ["evaluate"]

# Most direct first: a row reached by commit needs no carry-over at all.
_VIA_ORDER: tuple[Via, ...] = ("commit", "tree", "package")


def evaluate(
    *,
    plan: Plan | None,
    revision: Revision,
    receipts: Sequence[ReceiptEvidence],
    reviews: Sequence[ReviewEvidence],
    claims: Sequence[str] | None = None,
    query_scope: Mapping[str, str | int] | None = None,
    now: dt.datetime | None = None,
    quarantined: frozenset[str] = frozenset(),
) -> StatusReport:
    """The state of each asked claim for `revision`.

    Asked claims are `claims` if given (each then counts as required), else
    the plan's, else every claim with evidence. A claim absent from the plan
    gets the defaults (carry-over by commit, no reviews, no observer-off
    control, cleanup proof required).
    A claim whose plan scope `query_scope` contradicts is `not-applicable`.
    Evidence ages (the plan's evidence_max_age) against `now` (default: the clock).
    A receipt from a `quarantined` GPU UUID counts only with a clean health snapshot.
    """
    query = dict(query_scope or {})
    ctx = _Context(revision, receipts, reviews, now or dt.datetime.now(dt.UTC), quarantined)
    rows: list[ClaimStatus] = []
    asked = _asked(plan, claims, ctx)
    for req in asked:
        try:
            required_scope = merge_scopes(req.scope, query, claim=req.claim)
        except InputError as e:
            # The plan cannot answer at a scope it excludes: say so in the
            # answer for this claim instead of refusing the whole question.
            rows.append(_not_applicable(req, {**req.scope, **query}, e.reason()))
            continue
        rows.extend(_claim_rows(ctx, req, required_scope))
    qualified = bool(asked) and all(
        row.state == "qualified" for row in rows if row.scope_role == "required" and row.required
    )
    return StatusReport(
        subject=revision,
        qualified=qualified,
        claims=tuple(rows),
        query_scope=query,
        evidence=tuple(ctx.receipts),
    )


def _asked(plan: Plan | None, claims: Sequence[str] | None, ctx: _Context) -> list[Requirement]:
    if claims is None:
        if plan is not None:
            return [Requirement.from_plan(c, plan) for c in plan.claims]
        return [Requirement(claim=name) for name in sorted(ctx.by_claim)]
    out: list[Requirement] = []
    for name in dict.fromkeys(claims):
        spec = plan.claim(name) if plan is not None else None
        req = Requirement.from_plan(spec, plan) if spec is not None else Requirement(claim=name)
        # A claim asked by name is the question itself: the answer needs it, even
        # where the plan marks it optional for the revision as a whole.
        out.append(replace(req, required=True))
    return out


class _Context:
    """The evidence of one query, indexed, with per-receipt answers cached."""

    def __init__(
        self,
        revision: Revision,
        receipts: Sequence[ReceiptEvidence],
        reviews: Sequence[ReviewEvidence],
        now: dt.datetime,
        quarantined: frozenset[str] = frozenset(),
    ) -> None:
        self.revision = revision
        self.now = now
        self.quarantined = quarantined
        unique = {r.id: r for r in receipts}
        self.receipts = sorted(unique.values(), key=lambda r: (r.seq, r.id))
        self.by_claim: dict[str, list[ReceiptEvidence]] = defaultdict(list)
        self.named_by: dict[str, list[tuple[ReceiptEvidence, str]]] = defaultdict(list)
        for r in self.receipts:
            self.by_claim[r.predicate.claim].append(r)
            for s in r.predicate.supersedes:
                self.named_by[s.id].append((r, s.reason))
        self.reviews_of: dict[str, list[ReviewEvidence]] = defaultdict(list)
        for v in reviews:
            self.reviews_of[v.receipt].append(v)
        self._supersession: dict[tuple[str, CarryOver], Supersessions] = {}
        self._heads: dict[str, set[str]] = {}

    def link(self, r: ReceiptEvidence, carry_over: CarryOver) -> Via | None:
        return carry_rules.link(r, self.revision, carry_over)

    @staticmethod
    def sound(r: ReceiptEvidence) -> bool:
        """Signature, key, role and work tree all hold."""
        return not receipt_rules.integrity(r) and receipt_rules.dirty(r) is None

    def from_sick_gpu(self, r: ReceiptEvidence) -> Reason | None:
        return receipt_rules.quarantined_run(r, self.quarantined) if self.quarantined else None

    def supersession(self, r: ReceiptEvidence, carry_over: CarryOver) -> Supersessions:
        """What each later receipt naming `r` as superseded does to it."""
        key = (r.id, carry_over)
        if key not in self._supersession:
            self._supersession[key] = self._supersede(r, carry_over)
        return self._supersession[key]

    def _supersede(self, r: ReceiptEvidence, carry_over: CarryOver) -> Supersessions:
        out = Supersessions()
        r_link = self.link(r, carry_over)
        for s, why in self.named_by.get(r.id, []):
            elsewhere = (
                "it does not count for this revision"
                if r_link is not None and self.link(s, carry_over) is None
                else None
            )
            j = supersession.judge(r, s, why, self.reviews_of.get(s.id, []), elsewhere)
            {"effective": out.done, "pending": out.pending, "ignored": out.ignored}[
                j.effect
            ].append(j.reason)
        return out

    def failing_heads(self, req: Requirement) -> set[str]:
        """The commits of other code (`carry_rules.other_code`) on which a failure of the claim
        stands: sound, reaching this revision, not aged, not superseded."""
        if req.claim not in self._heads:
            self._heads[req.claim] = {
                c.predicate.source.commit
                for c in self.by_claim.get(req.claim, [])
                if carry_rules.other_code(c, self.revision)
                and self.sound(c)
                and self.link(c, req.carry_over) is not None
                and receipt_rules.effective_outcome(c)[0] == "failed"
                and carry_rules.aged(c, req, self.now) is None
                and self.from_sick_gpu(c) is None
                and not self.supersession(c, req.carry_over).done
            }
        return self._heads[req.claim]

    def control_for(self, r: ReceiptEvidence, req: Requirement) -> ReceiptEvidence | None:
        """A passing observer-off control of `r`'s check that covers `r`'s scope."""
        for c in self.receipts:
            if (
                pass_rules.controls(c, r.predicate.check.name)
                and pass_rules.covers_receipt(c, r)
                and self.sound(c)
                and self.link(c, req.carry_over) is not None
                and receipt_rules.effective_outcome(c)[0] == "passed"
                and not self.supersession(c, req.carry_over).done
                and pass_rules.cleanup_proof(c, req) is None
            ):
                return c
        return None


@dataclass
class Supersessions:
    """The supersessions of one receipt, by effect (each a reason to show)."""

    done: list[Reason] = field(default_factory=list)
    pending: list[Reason] = field(default_factory=list)
    """Valid in every way but authority: `supersession.SUPERSESSION_PENDING`."""
    ignored: list[Reason] = field(default_factory=list)


@dataclass
class _Row:
    """Receipts of one claim at one scope, sorted by what they count for."""

    counterexamples: list[ReceiptEvidence] = field(default_factory=list)
    qualifying: list[ReceiptEvidence] = field(default_factory=list)
    disputed: list[ReceiptEvidence] = field(default_factory=list)
    needs_review: list[ReceiptEvidence] = field(default_factory=list)
    """Passes whose one missing requirement is concurring reviews."""
    unverified: list[ReceiptEvidence] = field(default_factory=list)
    inconclusive: list[ReceiptEvidence] = field(default_factory=list)
    infra: list[ReceiptEvidence] = field(default_factory=list)
    """Sound infra-errors of this revision (or carried to it): the code was not judged."""
    stale: list[ReceiptEvidence] = field(default_factory=list)
    why: dict[str, list[Reason]] = field(default_factory=lambda: defaultdict(list))
    """Reasons about each receipt, by receipt id."""
    notes: list[Reason] = field(default_factory=list)
    """Reasons about receipts that count for nothing here."""


def _claim_rows(
    ctx: _Context, req: Requirement, required: dict[str, str | int]
) -> list[ClaimStatus]:
    members = [r for r in ctx.by_claim.get(req.claim, []) if covers(r.predicate.scope, required)]
    scopes: dict[tuple[tuple[str, str], ...], Mapping[str, str | int]] = {}
    for r in members:
        scopes.setdefault(scope_key(r.predicate.scope), r.predicate.scope)
    scopes.pop(scope_key(required), None)
    out = [_status(ctx, req, required, "required", members)]
    for key in sorted(scopes):
        scope = scopes[key]
        at = [r for r in members if covers(r.predicate.scope, scope)]
        out.append(_status(ctx, req, scope, "evidence", at))
    return out


def _status(
    ctx: _Context,
    req: Requirement,
    scope: Mapping[str, str | int],
    role: ScopeRole,
    members: list[ReceiptEvidence],
) -> ClaimStatus:
    row = _Row()
    for r in members:
        _sort(ctx, req, r, row)
    state, deciding, lead = _decide(req, scope, row, members)
    reasons = list(lead)
    decided = {r.id for r in deciding}
    for r in deciding:
        reasons.extend(row.why[r.id])
    for r in members:
        if r.id not in decided:
            reasons.extend(row.why[r.id])
    reasons.extend(row.notes)
    vias: list[Via] = []
    for r in deciding:
        v = ctx.link(r, req.carry_over)
        if v is not None:
            vias.append(v)
    via = next((v for v in _VIA_ORDER if v in vias), None)
    return ClaimStatus(
        claim=req.claim,
        scope=dict(scope),
        scope_role=role,
        state=state,
        receipts=tuple(r.id for r in deciding),
        via=via,
        reasons=tuple(dict.fromkeys(reasons)),
        required=req.required,
        in_plan=req.in_plan,
        check=req.check,
    )


def _sort(ctx: _Context, req: Requirement, r: ReceiptEvidence, row: _Row) -> None:
    """Put `r` in the group it counts for, and record why."""
    p = r.predicate
    sup = ctx.supersession(r, req.carry_over)
    row.notes.extend(sup.ignored)
    if sup.done:
        row.notes.extend(sup.done)
        return
    # Pending: the receipt stands, and its reasons say why the supersession did not count.
    row.why[r.id].extend(sup.pending)
    if p.outcome == "infra-error":
        # Never evidence either way; where it is this revision's own try (sound, and
        # reaching it), it says why nothing else is: the host failed, not the code.
        if ctx.sound(r) and ctx.link(r, req.carry_over) is not None:
            row.infra.append(r)
            row.why[r.id].append(receipt_rules.outcome_reason(r, rules.INFRA_ERROR))
        else:
            row.notes.append(receipt_rules.outcome_reason(r, rules.INFRA_ERROR))
        return
    if p.outcome == "refused":
        row.notes.append(receipt_rules.outcome_reason(r, rules.REFUSAL))
        return
    via = ctx.link(r, req.carry_over)
    if via is None:
        if carry_rules.earlier_head(r, ctx.revision) and ctx.sound(r):
            row.stale.append(r)
            row.why[r.id].append(carry_rules.stale(r, ctx.revision, req))
        else:
            row.notes.append(carry_rules.not_carried(r, ctx.revision, req))
        return
    problems = receipt_rules.integrity(r)
    dirty = receipt_rules.dirty(r)
    if problems or dirty is not None:
        row.unverified.append(r)
        row.why[r.id].extend(problems)
        if dirty is not None:
            row.why[r.id].append(dirty)
        return
    sick = ctx.from_sick_gpu(r)
    if sick is not None:
        row.unverified.append(r)
        row.why[r.id].append(sick)
        return
    old = carry_rules.aged(r, req, ctx.now)
    if old is not None:
        row.stale.append(r)
        row.why[r.id].append(old)
        return
    outcome, downgrade = receipt_rules.effective_outcome(r)
    if downgrade is not None:
        row.why[r.id].append(downgrade)
    if outcome == "failed" and req.base_heads > 1 and carry_rules.other_code(r, ctx.revision):
        heads = ctx.failing_heads(req)
        if len(heads) < req.base_heads:
            row.inconclusive.append(r)
            row.why[r.id].append(carry_rules.unconfirmed(r, req, len(heads)))
            return
    if outcome == "failed":
        row.counterexamples.append(r)
        reason = receipt_rules.outcome_reason(r, rules.COUNTEREXAMPLE)
        via_said = carry_rules.via_text(r, via, ctx.revision)
        row.why[r.id].append(Reason(reason.rule, f"{reason.text} {via_said}", r.id))
        row.why[r.id].extend(_review_notes(ctx, r))
        if r.revocation is not None:
            # Revoked without the independent dispute its supersession would need.
            row.why[r.id].append(
                Reason(
                    rules.COUNTEREXAMPLE,
                    f"{short_id(r.id)} stands: {r.revocation.text()} (revocation at seq "
                    f"{r.revocation.seq} names no independent reviewer's dispute of it)",
                    r.id,
                )
            )
        return
    if outcome == "inconclusive":
        row.inconclusive.append(r)
        if downgrade is None:
            row.why[r.id].append(receipt_rules.outcome_reason(r, rules.INCONCLUSIVE))
        return
    _sort_pass(ctx, req, r, via, row)


def _sort_pass(ctx: _Context, req: Requirement, r: ReceiptEvidence, via: Via, row: _Row) -> None:
    sid = short_id(r.id)
    blockers: list[Reason] = []
    support: list[Reason] = []
    checks = (
        pass_rules.planned_check(r, req),
        pass_rules.cleanup_proof(r, req),
        pass_rules.sandboxed(r, req),
    )
    for check in checks:
        if check is not None:
            blockers.append(check)
    if req.observer_off and r.predicate.observer == "on":
        control = ctx.control_for(r, req)
        if control is None:
            blockers.append(
                Reason(
                    rules.OBSERVER_OFF_CONTROL,
                    f"{sid} ran with the observer on, and no passing observer-off control of "
                    f"check {r.predicate.check.name!r} covers its scope",
                    r.id,
                )
            )
        else:
            support.append(
                Reason(
                    rules.OBSERVER_OFF_CONTROL,
                    f"{sid} ran with the observer on; observer-off control "
                    f"{short_id(control.id)} passed",
                    r.id,
                )
            )
    tally = ReviewTally.of(r, ctx.reviews_of.get(r.id, []))
    if len(tally.concur) < req.reviews:
        blockers.append(
            Reason(
                rules.REVIEWS,
                f"{sid} has {len(tally.concur)} of {req.reviews} concurring independent reviews",
                r.id,
            )
        )
    elif req.reviews:
        ids = ", ".join(short_id(v.id) for v in tally.concur)
        support.append(
            Reason(
                rules.REVIEWS, f"{sid} has {len(tally.concur)} concurring review(s): {ids}", r.id
            )
        )
    disputes = [_dispute(v, r) for v in tally.dispute]
    if r.revocation is not None:
        # Revoked on a word that does not count (an effective one is an integrity
        # problem, above): the pass stands, and says why.
        support.append(
            Reason(
                rules.RECEIPT_REVOKED,
                f"{sid} stands: {r.revocation.text()} (revocation at seq {r.revocation.seq})",
                r.id,
            )
        )
    # A pass's own note (an import whose signature was not verified) goes with it.
    note = f" ({r.predicate.reason})" if r.predicate.reason else ""
    via_said = carry_rules.via_text(r, via, ctx.revision)
    lead = Reason(rules.PASSING_EVIDENCE, f"{sid} passed{note} {via_said}", r.id)
    row.why[r.id].extend([lead, *disputes, *blockers, *support, *tally.ignored])
    if disputes:
        row.disputed.append(r)
    elif blockers and all(b.rule == rules.REVIEWS for b in blockers):
        row.needs_review.append(r)
    elif blockers:
        row.unverified.append(r)
    else:
        row.qualifying.append(r)


def _dispute(v: ReviewEvidence, r: ReceiptEvidence) -> Reason:
    note = f": {v.note}" if v.note else ""
    return Reason(
        rules.DISPUTE,
        f"review {short_id(v.id)} (key {v.signer[:12]}) disputes {short_id(r.id)}{note}",
        r.id,
    )


def _review_notes(ctx: _Context, r: ReceiptEvidence) -> list[Reason]:
    """Disputes of a counterexample are shown; only a supersession retires it."""
    tally = ReviewTally.of(r, ctx.reviews_of.get(r.id, []))
    return [_dispute(v, r) for v in tally.dispute]


def _decide(
    req: Requirement,
    scope: Mapping[str, str | int],
    row: _Row,
    members: list[ReceiptEvidence],
) -> tuple[State, list[ReceiptEvidence], list[Reason]]:
    """The state, the receipts that decide it, and reasons to put first."""
    if row.counterexamples:
        lead: list[Reason] = []
        passes = row.qualifying + row.disputed + row.needs_review + row.unverified
        if passes:
            # The first line a reviewer reads names what fails (the receipts and the
            # failing test or figure), never the passes it outweighs.
            lead.append(
                Reason(
                    rules.COUNTEREXAMPLE,
                    f"{len(row.counterexamples)} counterexample(s) outweigh {len(passes)} "
                    f"pass(es): {_failures(row.counterexamples)}",
                )
            )
        return "failed", row.counterexamples, lead
    groups: tuple[tuple[State, list[ReceiptEvidence]], ...] = (
        ("qualified", row.qualifying),
        ("disputed", row.disputed),
        ("needs-review", row.needs_review),
        ("unverified", row.unverified),
        ("inconclusive", row.inconclusive),
        # Before stale: this revision's own try failed for the host's reasons, and
        # a retry (not a fix) is what judges it.
        ("infra-error", row.infra),
        ("stale", row.stale),
    )
    for state, group in groups:
        if group:
            return state, group, [_infra_lead(group)] if state == "infra-error" else []
    text = (
        f"no receipt that counts covers scope {format_scope(scope)}"
        if members
        else f"no receipt of {req.claim!r} covers scope {format_scope(scope)}"
    )
    return "not-run", [], [Reason(rules.NO_EVIDENCE, text)]


def _infra_lead(broken: Sequence[ReceiptEvidence]) -> Reason:
    """The newest infra-error as a person acts on it: where (host, GPU) and what failed."""
    r = max(broken, key=lambda e: e.seq)
    p = r.predicate
    gpu = p.scope.get("gpu_model") or p.scope.get("device_kind") or "no GPU named"
    where = f"host {p.runner.host or 'unnamed'}, {gpu}"
    fault = p.reason or "no fault recorded"
    more = f" (the newest of {len(broken)} tries)" if len(broken) > 1 else ""
    return Reason(
        rules.INFRA_ERROR,
        f"{short_id(r.id)}{more} on {where}: {fault}; the code was not judged",
        r.id,
    )


def _failures(failed: Sequence[ReceiptEvidence], shown: int = 3) -> str:
    """The failing receipts with what failed in each (its reason: the failing test or
    figure), the first `shown` of them."""
    parts = []
    for r in failed[:shown]:
        why = r.predicate.reason
        parts.append(f"{short_id(r.id)} failed" + (f" ({why})" if why else ""))
    more = len(failed) - shown
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _not_applicable(req: Requirement, scope: Mapping[str, str | int], why: str) -> ClaimStatus:
    return ClaimStatus(
        claim=req.claim,
        scope=dict(scope),
        scope_role="required",
        state="not-applicable",
        receipts=(),
        via=None,
        reasons=(Reason(rules.SCOPE, why),),
        required=req.required,
        in_plan=req.in_plan,
        check=req.check,
    )
