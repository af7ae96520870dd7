"""The verdict a reviewer reads: one model of a status answer that every surface
renders (the terminal, `--json`, Markdown, JUnit, a GitHub check and the web
pages), so no surface decides a state of its own.

It is computed once per question from the engine's report: the headline
("N of M required claims qualified"), the blockers in order with their
reasons and the next command to run, per claim the required scope's state
and the evidence behind it with the one figure that decides it, and per receipt
what it means for this question.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias

from ledger.evidence.errors import EXIT_INFRA, EXIT_NEGATIVE, EXIT_OK
from ledger.qualification import rules
from ledger.qualification.attribution import Attribution, next_step
from ledger.qualification.deciding import Deciding, deciding_of
from ledger.qualification.evidence import ReceiptEvidence, Revision, short_id
from ledger.qualification.plan import OBSERVER_OFF_CONTROL_CHECK
from ledger.qualification.scope import covers, format_scope
from ledger.qualification.states import STATES, ClaimStatus, State
from ledger.qualification.supersession import SUPERSESSION_PENDING

__all__ = [
    "MEANINGS",
    "ClaimVerdict",
    "Meaning",
    "ReceiptMeaning",
    "Verdict",
    "record_command",
    "verdict_of",
]

Meaning: TypeAlias = Literal[
    "counts",
    "counterexample",
    "outweighed",
    "needs-review",
    "disputed",
    "does-not-hold",
    "inconclusive",
    "infra-error",
    "stale",
    "superseded",
    "supersession-pending",
    "not-evidence",
    "other-revision",
    "does-not-cover",
    "control",
    "control-run",
]
MEANINGS: Mapping[Meaning, str] = {
    "counts": "counts: qualifies the claim",
    "counterexample": "counterexample: fails the claim",
    "outweighed": "a pass outweighed by a counterexample",
    "needs-review": "a pass waiting for concurring reviews",
    "disputed": "disputed by a review: does not qualify",
    "does-not-hold": "does not hold (signature, key, cleanup, control or dirty tree)",
    "inconclusive": "inconclusive: decides nothing",
    "infra-error": "infra-error: the host failed, the code was not judged; a retry judges it",
    "stale": "stale: recorded for an earlier head, or older than the plan allows",
    "superseded": "superseded: replaced by a later receipt",
    "supersession-pending": f"{SUPERSESSION_PENDING}: it stands until its signer "
    "supersedes it or an independent reviewer concurs with the superseding receipt",
    "not-evidence": "not evidence either way (infrastructure error or refusal)",
    "other-revision": "for another revision: does not carry over",
    "does-not-cover": "does not cover the required scope",
    "control": "an observer-off control: it lets an observer-on pass count, "
    "and is not a pass of the claim itself",
    "control-run": "a run inside an observer-off control (observer on or off): "
    "the control compares it with the other run; not a pass of the claim",
}

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
# Blockers in the order a reviewer acts on them: what contradicts the claim
# first, what is merely missing last.
_BLOCKER_ORDER: tuple[State, ...] = tuple(s for s in STATES if s != "qualified")


@dataclass(frozen=True, slots=True)
class ReceiptMeaning:
    """What one receipt means for the question asked."""

    id: str
    claim: str
    outcome: str
    meaning: Meaning
    seq: int
    commit: str
    recorded: str | None
    """When the check finished (the runner's clock), ISO 8601."""
    observer: str
    environment: Mapping[str, str | int]
    """The receipt's scope, environment facets first (digests whole: surfaces shorten)."""
    reason: str | None
    """The engine's reason about this receipt, when it gave one."""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "short": short_id(self.id),
            "claim": self.claim,
            "outcome": self.outcome,
            "meaning": self.meaning,
            "meaning_text": MEANINGS[self.meaning],
            "seq": self.seq,
            "commit": self.commit,
            "recorded": self.recorded,
            "observer": self.observer,
            "environment": dict(self.environment),
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class ClaimVerdict:
    """One asked claim at its required scope."""

    claim: str
    required: bool
    state: State
    scope: Mapping[str, str | int]
    via: str | None
    reasons: tuple[str, ...]
    """The reasons that decide the state (for a qualified claim: only what qualifies it)."""
    next: str | None
    """The command to run next, when the claim is not qualified."""
    receipts: tuple[ReceiptMeaning, ...]
    """Every receipt of the claim the ledger holds for this question, deciding ones first."""
    attribution: Attribution | None = None
    """For a blocker: whose failure it is, beside the commit the head branched from."""
    deciding: Deciding | None = None
    """The figure of the receipt that decides the state (the counterexample of a failed
    claim, else the receipt it is qualified on; the newest where several do), with its
    bound: what the receipt page, `ledger show` and the blocker's trend link say.
    None where no receipt decides it or the receipt records no figure."""

    @property
    def scope_text(self) -> str:
        return format_scope(self.scope)

    def to_json(self) -> dict[str, Any]:
        return {
            "claim": self.claim,
            "required": self.required,
            "state": self.state,
            "scope": dict(self.scope),
            "scope_text": self.scope_text,
            "via": self.via,
            "reasons": list(self.reasons),
            "next": self.next,
            "receipts": [r.to_json() for r in self.receipts],
            "attribution": self.attribution.to_json() if self.attribution else None,
            "deciding": self.deciding.to_json() if self.deciding else None,
        }


@dataclass(frozen=True, slots=True)
class Verdict:
    """The whole answer as a reviewer reads it."""

    qualified: bool
    required: int
    """Required claims asked."""
    qualified_required: int
    """Of those, how many are qualified at their required scope."""
    claims: tuple[ClaimVerdict, ...]
    scopes: tuple[str, ...]
    """The required scopes asked (the columns of a matrix), in first-asked order."""
    governed: bool = True
    """False: no governing plan is known (and no claim was named), nothing was judged."""
    ungoverned: str = "no governing plan recorded"
    """Why none is known, as the headline says it (a conflict between plan entries)."""
    run_once: tuple[str, tuple[str, ...]] | None = None
    """One `ledger qualify` that records evidence for several blockers at once (the
    command, the claims it serves), where each would otherwise get its own."""
    problems: int = 0
    """Entries that bear on the answer but do not read, and what keeps the plan unknown:
    the answer is open while any stands (never only infrastructure's)."""

    @property
    def exit_code(self) -> int:
        """The exit status the answer asks of every command that ends on it: 0 qualified;
        3 not qualified only because of infrastructure (every blocker an infra-error: a
        retry, not a fix, decides it); else 1 (the code was judged, evidence is missing,
        or an entry does not read)."""
        if self.qualified:
            return EXIT_OK
        return EXIT_INFRA if self.infra_only and not self.problems else EXIT_NEGATIVE

    @property
    def infra_only(self) -> bool:
        """Not qualified only because of infrastructure: every blocker is an infra-error
        (the code was not judged; a retry, not a fix, decides it)."""
        blockers = self.blockers
        return (
            self.governed
            and not self.qualified
            and bool(blockers)
            and all(c.state == "infra-error" for c in blockers)
        )

    @property
    def headline(self) -> str:
        if not self.governed:
            return f"not qualified: {self.ungoverned}"
        word = "qualified" if self.qualified else "not qualified"
        if self.infra_only:
            word = "not qualified only because of infrastructure (infra-error)"
        return f"{word}: {self.qualified_required} of {self.required} required claims qualified"

    @property
    def whose(self) -> str:
        """Whose the blockers are, counted apart where a baseline told any: those this
        pull request introduced and those already on its base, said under the headline
        (empty where no blocker was set beside its base)."""
        labels = [c.attribution for c in self.blockers if c.attribution is not None]
        introduced = sum(a.label == "introduced" for a in labels)
        inherited = sum(a.inherited for a in labels)
        if not introduced and not inherited:
            return ""
        rest = len(self.blockers) - introduced - inherited
        parts = [
            f"{introduced} introduced by this pull request",
            f"{inherited} already on the base",
        ]
        if rest:
            parts.append(f"{rest} not attributed")
        return "blocking: " + ", ".join(parts)

    @property
    def inherited_only(self) -> bool:
        """Not qualified, and every blocker already fails on the base: the pull request
        brought none of them (a check asks for a person's action, not a fix here)."""
        blockers = self.blockers
        return (
            self.governed
            and not self.qualified
            and bool(blockers)
            and all(c.attribution is not None and c.attribution.inherited for c in blockers)
        )

    @property
    def blockers(self) -> tuple[ClaimVerdict, ...]:
        """Required claims that are not qualified, worst first (then in plan order)."""
        rank = {s: i for i, s in enumerate(_BLOCKER_ORDER)}
        todo = [c for c in self.claims if c.required and c.state != "qualified"]
        return tuple(sorted(todo, key=lambda c: rank.get(c.state, len(rank))))

    def receipt(self, receipt_id: str) -> ReceiptMeaning | None:
        """What `receipt_id` means here (None when this question does not involve it)."""
        for c in self.claims:
            for r in c.receipts:
                if r.id == receipt_id:
                    return r
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "qualified": self.qualified,
            "headline": self.headline,
            "required": self.required,
            "qualified_required": self.qualified_required,
            "scopes": list(self.scopes),
            "governed": self.governed,
            "infra_only": self.infra_only,
            "inherited_only": self.inherited_only,
            "whose": self.whose,
            "blockers": [
                {
                    "claim": c.claim,
                    "state": c.state,
                    "scope_text": c.scope_text,
                    "reasons": list(c.reasons),
                    "next": c.next,
                    "attribution": c.attribution.to_json() if c.attribution else None,
                    "deciding": c.deciding.to_json() if c.deciding else None,
                }
                for c in self.blockers
            ],
            "claims": [c.to_json() for c in self.claims],
            "run_once": (
                None
                if self.run_once is None
                else {"command": self.run_once[0], "claims": list(self.run_once[1])}
            ),
            "exit_code": self.exit_code,
        }


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
                next=_next_of(row, target, labels.get(row.claim)),
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
        run_once=_run_once(report.claims, claims, target),
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


def _run_once(
    rows: Sequence[ClaimStatus], claims: Sequence[ClaimVerdict], target: str
) -> tuple[str, tuple[str, ...]] | None:
    """One `ledger qualify` for the required claims whose next step is just a
    qualify run, where there are two or more: without --claim where that runs
    nothing else that already qualifies, else naming each."""
    check = {r.claim: r.check for r in rows if r.scope_role == "required"}

    def by_qualify(claim: str) -> bool:
        c = check.get(claim)
        return c is not None and c not in _RECORDED_BY

    todo = [
        c.claim
        for c in claims
        if c.required
        and by_qualify(c.claim)
        and c.next == f"`{record_command(c.claim, check[c.claim], target)}`"
    ]
    if len(todo) < 2:
        return None
    rest = [c for c in claims if by_qualify(c.claim) and c.claim not in todo]
    if not rest:
        return f"ledger qualify {target}", tuple(todo)
    return f"ledger qualify {target} " + " ".join(f"--claim {c}" for c in todo), tuple(todo)


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


# The command that records evidence for a claim, by the check the plan names: the
# checks qualify runs, and those whose receipts another command records.
_RECORDED_BY: Mapping[str, str] = {
    "import-junit": "ledger import junit REPORT.xml --claim {claim} {target} --key RUNNER",
    "import-in-toto": "ledger import in-toto STATEMENT --claim {claim} {target} --key RUNNER",
    "import-admission-events": (
        "ledger import admission-events SPOOL --claim {claim} {target} --key RUNNER"
    ),
    "command": "ledger run --claim {claim} {target} --key RUNNER -- CMD ...",
}


def record_command(claim: str, check: str | None, target: str) -> str:
    """The command that records new evidence for `claim` (checked by `check`)."""
    if check is None:
        # Not in the plan: only another harness's result can be attested for it.
        return f"ledger attest --claim {claim} {target} --outcome OUTCOME --key RUNNER --unplanned"
    form = _RECORDED_BY.get(check, "ledger qualify {target} --claim {claim}")
    return form.format(claim=claim, target=target)


def _next_of(row: ClaimStatus, target: str, label: Attribution | None) -> str | None:
    """The next step; for a failure already on the base, the base's (`next_step`)."""
    if row.state != "qualified" and label is not None and label.inherited:
        return next_step(label, target)
    return _next(row, target)


def _next(row: ClaimStatus, target: str) -> str | None:
    qualify = record_command(row.claim, row.check, target)
    first = short_id(row.receipts[0]) if row.receipts else "ID"
    rules_here = {r.rule for r in row.reasons}
    match row.state:
        case "qualified":
            return None
        case "failed" if (by := _pending_by(row)) is not None:
            return (
                f"`ledger review {by} --concur --note TEXT --key REVIEWER` (an independent "
                f"reviewer) lets {by} retire {first}, or its signer supersedes it"
            )
        case "failed":
            return (
                f"`{qualify}` after a fix, or `ledger supersede {first} --reason TEXT "
                f"--key RUNNER` if the failure was not the code's"
            )
        case "needs-review":
            return f"`ledger review {first} --concur --note TEXT --key REVIEWER` (not the signer)"
        case "disputed":
            return f"read the dispute (`ledger show {first}`), then `{qualify}`"
        case "unverified":
            if rules.DIRTY_TREE in rules_here:
                return f"commit the work tree, then `{qualify}`"
            if rules_here & {rules.SIGNATURE, rules.KEY_REVOKED, rules.SIGNER_ROLE}:
                return f"`ledger audit`, then `{qualify}` with a valid runner key"
            return f"`{qualify}`"
        case "not-applicable":
            return "ask at a scope the plan's scope allows (drop or change --scope)"
        case "infra-error":
            return f"retry: `{qualify}` (the host failed, not the code: nothing to fix)"
        case _:
            return f"`{qualify}`"


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
        if any(_pending(x) for x in reasons):
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


def _pending(reason: rules.Reason) -> bool:
    return reason.rule == rules.SUPERSESSION and reason.text.startswith(SUPERSESSION_PENDING)


def _pending_by(row: ClaimStatus) -> str | None:
    """The short id of a receipt whose supersession of this row's evidence waits for review."""
    for r in row.reasons:
        if _pending(r):
            return r.text.removeprefix(SUPERSESSION_PENDING + ": ").split(" ", 1)[0]
    return None


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
