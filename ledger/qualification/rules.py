"""The named rules that decide what one receipt counts for: the catalogue.

Each rule has a stable name; every reason the engine gives starts with the
name of the rule that produced it (`rule: text`), so answers can be searched
and scripts can match on them. `RULES` describes each in one line, here, so one
looks a rule up by its name in one place; `Reason` is what each gives and
`Requirement` what one asked claim needs of its evidence. The rules themselves
live by what they judge: a receipt's own standing (`receipt_rules.py`), whether
evidence of other code or another time counts (`carry_rules.py`), what a
requirement asks of a pass (`pass_rules.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from pydantic import JsonValue

from ledger.qualification.plan import CarryOver, ClaimSpec, Plan
from ledger.qualification.scope import Facets

__all__ = [
    "BASE_CONFIRMATION",
    "CARRY_OVER",
    "CLEANUP_PROOF",
    "COMPARISON_ARMS",
    "COUNTEREXAMPLE",
    "DIRTY_TREE",
    "DISPUTE",
    "EVIDENCE_AGE",
    "INCONCLUSIVE",
    "INFRA_ERROR",
    "KEY_REVOKED",
    "NO_EVIDENCE",
    "OBSERVER_OFF_CONTROL",
    "PASSING_EVIDENCE",
    "PLANNED_CHECK",
    "QUARANTINE",
    "RECEIPT_REVOKED",
    "REFUSAL",
    "REVIEWS",
    "RULES",
    "SANDBOX",
    "SCOPE",
    "SIGNATURE",
    "SIGNER_ROLE",
    "STALE_HEAD",
    "SUPERSESSION",
    "Reason",
    "Requirement",
    "Via",
]

Via: TypeAlias = Literal["commit", "tree", "package"]

PASSING_EVIDENCE = "passing-evidence"
CARRY_OVER = "carry-over"
STALE_HEAD = "stale-head"
COUNTEREXAMPLE = "counterexample"
SUPERSESSION = "supersession"
INFRA_ERROR = "infra-error"
REFUSAL = "refusal"
INCONCLUSIVE = "inconclusive"
COMPARISON_ARMS = "comparison-arms"
OBSERVER_OFF_CONTROL = "observer-off-control"
CLEANUP_PROOF = "cleanup-proof"
SANDBOX = "sandbox"
DIRTY_TREE = "dirty-tree"
PLANNED_CHECK = "planned-check"
REVIEWS = "reviews"
DISPUTE = "dispute"
SIGNATURE = "signature"
KEY_REVOKED = "key-revoked"
RECEIPT_REVOKED = "receipt-revoked"
SIGNER_ROLE = "signer-role"
NO_EVIDENCE = "no-evidence"
SCOPE = "scope"
EVIDENCE_AGE = "evidence-age"
BASE_CONFIRMATION = "base-confirmation"
QUARANTINE = "quarantine"

RULES: Mapping[str, str] = {
    PASSING_EVIDENCE: "a valid pass that meets every requirement of the claim qualifies it",
    CARRY_OVER: "evidence for another commit counts only via the same tree (carry_over tree "
    "or package) or the same package digest (carry_over package)",
    STALE_HEAD: "evidence only on an earlier head of the same PR whose tree/package differs "
    "is stale",
    COUNTEREXAMPLE: "a valid failing receipt outweighs any number of passes until a later "
    "receipt explicitly supersedes it",
    SUPERSESSION: "a later valid, decisive receipt of the same claim, covering the same "
    "scope and counting for the same revision, replaces the receipts it names; a failure "
    "whose only cause a later version of its check removed is superseded by the check's "
    "fix and counts as inconclusive",
    INFRA_ERROR: "an infrastructure failure is never evidence either way",
    REFUSAL: "an admission refusal is neither a failure of the claim nor proof of infeasibility",
    INCONCLUSIVE: "inconclusive evidence neither qualifies nor fails a claim",
    COMPARISON_ARMS: "an A/B comparison whose arms ran on different GPUs or from different "
    "reserved bytes is inconclusive, whatever it concluded",
    OBSERVER_OFF_CONTROL: "an observer-on pass counts only where a passing observer-off "
    "control of the same check covers its scope (when the claim requires it)",
    CLEANUP_PROOF: "a pass without a complete cleanup proof does not qualify (when the claim "
    "requires it)",
    SANDBOX: "a pass counts only from a sandboxed run where the plan requires a sandbox "
    '([runner] sandbox = "required")',
    DIRTY_TREE: "a receipt from a dirty work tree identifies no commit and counts neither way",
    PLANNED_CHECK: "a pass counts only if it ran the plan's check with the plan's parameters",
    REVIEWS: "a pass needs the claim's number of concurring reviews from reviewer keys other "
    "than its signer",
    DISPUTE: "a valid review disputing a pass keeps it from qualifying",
    SIGNATURE: "a receipt or review whose signature or key does not verify does not count",
    KEY_REVOKED: "a receipt or review logged after its key's revocation does not count",
    RECEIPT_REVOKED: "a revoked receipt counts for nothing; a counterexample's revocation "
    "counts only where an independent reviewer disputes it, as its supersession would need",
    SIGNER_ROLE: "receipts count only from runner keys, reviews only from reviewer keys",
    NO_EVIDENCE: "no receipt of the claim covers the scope",
    SCOPE: "a claim asked at a scope its plan excludes is not applicable there",
    EVIDENCE_AGE: "a receipt finished longer ago than the plan's evidence_max_age is stale "
    "(a plan without it keeps every receipt)",
    BASE_CONFIRMATION: "a counterexample recorded for other code than the pull request's "
    "(its base branch, another pull request) blocks it only once failures of the claim "
    "stand on the plan's base_counterexample_heads distinct commits",
    QUARANTINE: "a receipt from a GPU the fleet quarantines (the plan's quarantine_above) "
    "counts only with a clean health snapshot",
}


@dataclass(frozen=True, slots=True)
class Reason:
    """Why: the rule, a sentence, and the receipt it is about (if one)."""

    rule: str
    text: str
    receipt: str | None = None

    def __str__(self) -> str:
        return f"{self.rule}: {self.text}"


@dataclass(frozen=True, slots=True)
class Requirement:
    """What one asked claim needs of its evidence (from the plan, or the defaults)."""

    claim: str
    check: str | None = None
    """Check a pass must have run; None where the plan does not name the claim."""
    params: Mapping[str, JsonValue] = field(default_factory=dict)
    scope: Facets = field(default_factory=dict)
    carry_over: CarryOver = "commit"
    reviews: int = 0
    observer_off: bool = False
    cleanup: bool = True
    sandbox: bool = False
    """Whether a pass must come from a sandboxed run (the plan's `[runner] sandbox`)."""
    required: bool = True
    in_plan: bool = False
    profile_params: Mapping[str, Mapping[str, JsonValue]] = field(default_factory=dict)
    """The check parameters under each of the plan's profiles: a receipt whose scope
    names a profile (``profile`` facet) must record those instead of `params`."""
    max_age_s: int | None = None
    """The plan's evidence_max_age in seconds; None: evidence never ages."""
    max_age: str | None = None
    """The same as the plan spells it (``72h``), for the reason."""
    base_heads: int = 1
    """The plan's base_counterexample_heads."""

    @classmethod
    def from_plan(cls, spec: ClaimSpec, plan: Plan | None = None) -> Requirement:
        profiled: dict[str, Mapping[str, JsonValue]] = {}
        for name in plan.profiles if plan is not None else ():
            got = plan.with_profile(name).claim(spec.name) if plan is not None else None
            if got is not None:
                profiled[name] = got.params
        return cls(
            claim=spec.name,
            check=spec.check,
            params=spec.params,
            profile_params=profiled,
            scope=spec.scope,
            carry_over=spec.carry_over,
            reviews=spec.reviews,
            observer_off=spec.observer_off,
            cleanup=spec.cleanup,
            sandbox=plan is not None and plan.runner.sandbox == "required",
            required=spec.required,
            in_plan=True,
            max_age_s=plan.evidence_max_age_s if plan is not None else None,
            max_age=plan.evidence_max_age if plan is not None else None,
            base_heads=plan.base_counterexample_heads if plan is not None else 1,
        )
