"""What a status answer means for a reviewer: `verdict_of` fills the verdict model
(`verdict.py`) from the engine's report, read by its shape (`Answer`), with per
claim the reasons and the figure that decide its state and the next command
(`next_command.py`), and per receipt what it means for this question.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from ledger.qualification import rules
from ledger.qualification.attribution import Attribution
from ledger.qualification.deciding import Deciding, deciding_of
from ledger.qualification.evidence import ReceiptEvidence, Revision, short_id
from ledger.qualification.next_command import next_of, run_once
from ledger.qualification.plan import OBSERVER_OFF_CONTROL_CHECK
from ledger.qualification.scope import covers
from ledger.qualification.states import ClaimStatus, State
from ledger.qualification.supersession import pending
from ledger.qualification.verdict import ClaimVerdict, Meaning, ReceiptMeaning, Verdict

__all__ = ["Answer", "verdict_of"]

# The state a receipt that decides a row has, read as what it means.
_BY_STATE: Mapping[State, Meaning] = {
    "qualified": "counts",
    "failed": "counterexample",
    "disputed": "disputed",
    "needs-review": "needs-review",
    "unverified": "does-not-hold",
    "inconclusive": "inconclusive",
    "infra-error": "infra-error",
    "stale": "stale",
}
# For a receipt that does not decide its row: the first reason about it that
# names one of these rules says what it is.
_BY_RULE: tuple[tuple[str, Meaning], ...] = (
    (rules.SUPERSESSION, "superseded"),
    (rules.INFRA_ERROR, "not-evidence"),
    (rules.REFUSAL, "not-evidence"),
    (rules.CARRY_OVER, "other-revision"),
    (rules.STALE_HEAD, "stale"),
    (rules.EVIDENCE_AGE, "stale"),
    (rules.QUARANTINE, "does-not-hold"),
    (rules.BASE_CONFIRMATION, "inconclusive"),
    (rules.SIGNATURE, "does-not-hold"),
    (rules.KEY_REVOKED, "does-not-hold"),
    (rules.RECEIPT_REVOKED, "does-not-hold"),
    (rules.SIGNER_ROLE, "does-not-hold"),
    (rules.DIRTY_TREE, "does-not-hold"),
    (rules.DISPUTE, "disputed"),
    (rules.COUNTEREXAMPLE, "counterexample"),
    (rules.INCONCLUSIVE, "inconclusive"),
    (rules.COMPARISON_ARMS, "inconclusive"),
    (rules.REVIEWS, "needs-review"),
    # A pass that lacks what the plan requires of it (the planned check, a cleanup
    # proof, a sandbox, an observer-off control) does not hold; "outweighed" is
    # only ever said where a counterexample decides the row (`_meanings`).
    (rules.PLANNED_CHECK, "does-not-hold"),
    (rules.CLEANUP_PROOF, "does-not-hold"),
    (rules.SANDBOX, "does-not-hold"),
    (rules.OBSERVER_OFF_CONTROL, "does-not-hold"),
)
# Facets a reviewer reads as the evidence's environment, in this order; the
# rest follow sorted.
_ENV_ORDER = (
    "device_kind",
    "gpu_model",
    "gpu_count",
    "gpu_memory_bytes",
    "driver",
    "cuda",
    "torch",
    "nccl",
    "python",
    "dtype",
    "workload",
    "profile",
)


class Answer(Protocol):
    """What a verdict reads of a status answer (`report.StatusReport`), named by
    its shape: the report imports the verdict for its JSON, never the reverse."""

    @property
    def subject(self) -> Revision: ...
    @property
    def qualified(self) -> bool: ...
    @property
    def claims(self) -> Sequence[ClaimStatus]: ...
    @property
    def evidence(self) -> Sequence[ReceiptEvidence]: ...
    @property
    def governed(self) -> bool: ...
    @property
    def ungoverned(self) -> str: ...
    @property
    def baselines(self) -> Sequence[Attribution]: ...
    @property
    def problems(self) -> Sequence[str]: ...


def verdict_of(report: Answer) -> Verdict:
    """The verdict of one status answer (the engine's report and its evidence, with
    whose each failure is where the judge set it beside its base)."""
    target = _target(report)
    labels = {a.claim: a for a in report.baselines}
    claims: list[ClaimVerdict] = []
    for row in report.claims:
        if row.scope_role != "required":
            continue
        evidence = [r for r in report.evidence if r.predicate.claim == row.claim]
        claims.append(
            ClaimVerdict(
                claim=row.claim,
                required=row.required,
                state=row.state,
                scope=dict(row.scope),
                via=row.via,
                reasons=_deciding_reasons(row),
                next=next_of(row, target, labels.get(row.claim)),
                receipts=_meanings(row, evidence),
                # Only a claim that blocks carries its label.
                attribution=labels.get(row.claim) if row.state != "qualified" else None,
                deciding=_deciding(row, evidence),
            )
        )
    required = [c for c in claims if c.required]
    return Verdict(
        qualified=report.qualified,
        required=len(required),
        qualified_required=sum(c.state == "qualified" for c in required),
        claims=tuple(claims),
        scopes=tuple(dict.fromkeys(c.scope_text for c in claims)),
        governed=report.governed,
        ungoverned=report.ungoverned,
        run_once=run_once(report.claims, claims, target),
        problems=len(report.problems),
    )


def _deciding(row: ClaimStatus, evidence: Sequence[ReceiptEvidence]) -> Deciding | None:
    """The figure of the newest receipt that decides the row, read from its predicate as
    signed (its JSON), as every surface that shows one receipt reads it."""
    decides = [r for r in evidence if r.id in set(row.receipts)]
    if not decides:
        return None
    newest = max(decides, key=lambda r: r.seq)
    return deciding_of(newest.predicate.model_dump(mode="json", include={"check", "measurements"}))


def _target(report: Answer) -> str:
    s = report.subject
    return f"--pr {s.pr}" if s.pr is not None else f"--rev {s.commit[:12]}"


def _deciding_reasons(row: ClaimStatus) -> tuple[str, ...]:
    """A qualified row's reasons about what qualifies it only, so what other
    receipts lack never reads like a fault; every reason otherwise."""
    reasons = row.reasons
    if row.state == "qualified":
        deciding = set(row.receipts)
        reasons = tuple(r for r in reasons if r.receipt is None or r.receipt in deciding)
    return tuple(str(r) for r in reasons)


def _meanings(row: ClaimStatus, evidence: Sequence[ReceiptEvidence]) -> tuple[ReceiptMeaning, ...]:
    about: dict[str, list[rules.Reason]] = {}
    for why in row.reasons:
        if why.receipt is not None:
            about.setdefault(why.receipt, []).append(why)
    deciding = set(row.receipts)
    out: list[ReceiptMeaning] = []
    for r in sorted(evidence, key=lambda e: (e.id not in deciding, -e.seq)):
        reasons = about.get(r.id, [])
        meaning: Meaning | None = None
        if any(pending(x) for x in reasons):
            meaning = "supersession-pending"
        elif r.id not in deciding and not covers(r.predicate.scope, row.scope):
            meaning = "does-not-cover"
        elif _is_control_run(r, row) and not (row.state == "failed" and r.id in deciding):
            meaning = "control-run"
            reasons = [_control_run_reason(r)]
        elif _is_control(r, row) and not (row.state == "failed" and r.id in deciding):
            # It ran another check, for the claim's observer-on passes: neither a pass
            # of the claim nor outweighed by anything.
            meaning = "control"
            reasons = [_control_reason(r)]
        elif r.id in deciding and row.state in _BY_STATE:
            meaning = _BY_STATE[row.state]
        elif row.state == "failed" and any(x.rule == rules.PASSING_EVIDENCE for x in reasons):
            meaning = "outweighed"
        else:
            meaning = _by_reasons(reasons)
        if meaning is None:
            continue
        out.append(_meaning(r, meaning, reasons))
    return tuple(out)


def _is_control(r: ReceiptEvidence, row: ClaimStatus) -> bool:
    p = r.predicate
    return p.check.name == OBSERVER_OFF_CONTROL_CHECK and p.check.name != row.check


def _is_control_run(r: ReceiptEvidence, row: ClaimStatus) -> bool:
    """One of the two runs an observer-off control claim records beside its verdict."""
    return row.check == OBSERVER_OFF_CONTROL_CHECK and (
        r.predicate.check.name != OBSERVER_OFF_CONTROL_CHECK
    )


def _control_run_reason(r: ReceiptEvidence) -> rules.Reason:
    p = r.predicate
    return rules.Reason(
        rules.OBSERVER_OFF_CONTROL,
        f"{short_id(r.id)} is the observer-{p.observer} run of check {p.check.name!r} "
        f"inside the observer-off control ({p.outcome}); the control compares the two runs",
        r.id,
    )


def _control_reason(r: ReceiptEvidence) -> rules.Reason:
    p = r.predicate
    of = p.check.parameters.get("check")
    return rules.Reason(
        rules.OBSERVER_OFF_CONTROL,
        f"{short_id(r.id)} is an observer-off control of check {of!r} ({p.outcome}); "
        "it supports observer-on passes of the claim at scopes it covers",
        r.id,
    )


def _by_reasons(reasons: Sequence[rules.Reason]) -> Meaning | None:
    for rule, meaning in _BY_RULE:
        for r in reasons:
            if r.rule != rule:
                continue
            if rule == rules.SUPERSESSION and not r.text.startswith("superseded by", 13):
                # Only an effective supersession ("<id> superseded by ...") retires it.
                continue
            return meaning
    return None


def _meaning(
    r: ReceiptEvidence, meaning: Meaning, reasons: Sequence[rules.Reason]
) -> ReceiptMeaning:
    p = r.predicate
    scope = dict(p.scope)
    env = {k: scope[k] for k in _ENV_ORDER if k in scope}
    env.update({k: scope[k] for k in sorted(scope) if k not in env})
    env.update({k: v for k, v in sorted(p.runner.environment.items()) if k not in env})
    return ReceiptMeaning(
        id=r.id,
        claim=p.claim,
        outcome=p.outcome,
        meaning=meaning,
        seq=r.seq,
        commit=p.source.commit,
        recorded=str(p.runner.finished),
        observer=p.observer,
        environment=env,
        reason=str(reasons[0]) if reasons else None,
    )
