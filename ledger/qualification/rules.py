"""The named rules that decide what one receipt counts for.

Each rule has a stable name; every reason the engine gives starts with the
name of the rule that produced it (`rule: text`), so answers can be searched
and scripts can match on them. `RULES` describes each in one line.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from pydantic import JsonValue

from ledger.evidence.models import Outcome
from ledger.qualification import check_fixes
from ledger.qualification.evidence import ReceiptEvidence, Revision, short_id
from ledger.qualification.plan import OBSERVER_OFF_CONTROL_CHECK, CarryOver, ClaimSpec, Plan
from ledger.qualification.scope import Facets, covers

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


# -- carry-over ---------------------------------------------------------------


def link(r: ReceiptEvidence, revision: Revision, carry_over: CarryOver) -> Via | None:
    """How `r` reaches `revision` under the claim's carry-over, if it does. Another
    commit's receipt carries only where its workload definition is the revision's
    (`definition_gap`): by tree where it recorded that definition or none (a tree holds
    its plan), by package where it recorded the same, or recorded none and a checkout
    showed its commit's definition to be the revision's."""
    src = r.predicate.source
    if src.commit == revision.commit:
        return "commit"
    gap = definition_gap(r, revision)
    # A tree holds its plan: only a definition recorded otherwise (`--plan FILE`) keeps
    # a receipt of the same tree from carrying.
    same_tree = src.tree == revision.tree
    if carry_over != "commit" and same_tree and (gap is None or _recorded_definition(r) is None):
        return "tree"
    if carry_over != "package" or revision.package_digest is None or src.package is None:
        return None
    if gap is not None:
        return None
    if src.package.digest == revision.package_digest:
        return "package"
    if revision.prior_package_digest is not None and src.package.digest == (
        revision.prior_package_digest
    ):
        return "package"
    return None


def _recorded_definition(r: ReceiptEvidence) -> str | None:
    """The ``workload`` part of `r`'s package identity (None: it records none)."""
    package = r.predicate.source.package
    return (package.parts or {}).get("workload") if package is not None else None


def definition_gap(r: ReceiptEvidence, revision: Revision) -> str | None:
    """Why `r` (of another commit) ran another workload definition than the revision's,
    or None where it ran the same, or neither records one. The package identity records
    the definition (its ``workload`` part); a receipt recorded before it did counts only
    where a checkout showed its commit's definition to be the revision's
    (`Revision.definition_proofs`, read where the evidence is gathered)."""
    src = r.predicate.source
    if revision.package_digest is None or src.package is None:
        return None
    recorded, now = _recorded_definition(r), revision.definition
    if recorded == now:
        return None
    proof = revision.proof(src.commit)
    if recorded is None:
        if proof is not None and proof.same:
            return None
        if proof is None or proof.same is None:
            why = proof.said if proof is not None else "no checkout was read"
            return (
                "it was recorded before the package identity covered the workload "
                "definition, and its commit's definition could not be shown to be this "
                f"revision's ({why})"
            )
    if proof is not None and proof.said:
        return f"the workload definition changed: {proof.said}"
    return (
        f"the workload definition changed (recorded {(recorded or 'none')[:12]}, "
        f"now {(now or 'none')[:12]})"
    )


def _same_but_definition(r: ReceiptEvidence, revision: Revision) -> bool:
    """`r`'s package identity is the revision's in everything but the workload definition."""
    from ledger.identity.environment_identity import prior_digest

    package = r.predicate.source.package
    if package is None or revision.package_digest is None:
        return False
    mine = revision.prior_package_digest or revision.package_digest
    theirs = prior_digest(package.parts) if package.parts else package.digest
    return theirs == mine


def earlier_head(r: ReceiptEvidence, revision: Revision) -> bool:
    """`r` is about another head of the PR asked about."""
    src = r.predicate.source
    return revision.pr is not None and src.pr == revision.pr and src.commit != revision.commit


def via_text(r: ReceiptEvidence, via: Via, revision: Revision | None = None) -> str:
    src = r.predicate.source
    if via == "commit":
        return "via commit"
    if via == "tree":
        return f"via tree (commit {src.commit[:12]} has the same tree)"
    if (
        revision is not None
        and revision.definition is not None
        and (_recorded_definition(r) is None)
    ):
        return (
            f"via package (commit {src.commit[:12]} has the same package files; recorded "
            "before the package identity covered the workload definition, its commit's "
            "definition, read from the checkout, is this revision's)"
        )
    return f"via package (commit {src.commit[:12]} has the same package digest)"


def not_carried(r: ReceiptEvidence, revision: Revision, req: Requirement) -> Reason:
    src = r.predicate.source
    sid = short_id(r.id)
    same_tree = src.tree == revision.tree
    same_pkg = (
        revision.package_digest is not None
        and src.package is not None
        and src.package.digest == revision.package_digest
    )
    gap = definition_gap(r, revision) if req.carry_over != "commit" else None
    same_files = _same_but_definition(r, revision)
    if gap is not None and (same_tree or (req.carry_over == "package" and same_files)):
        what = "tree" if same_tree else "package files"
        text = f"{sid} on commit {src.commit[:12]} has the same {what}, but {gap}"
    elif same_tree or same_pkg:
        what = "tree" if same_tree else "package digest"
        text = (
            f"{sid} on commit {src.commit[:12]} has the same {what}, but claim "
            f"{req.claim!r} carries over by {req.carry_over} only"
        )
    elif req.carry_over == "package" and src.package is None:
        text = f"{sid} on commit {src.commit[:12]} records no package identity"
    elif (
        req.carry_over == "package"
        and src.package is not None
        and (src.package.parts or revision.package_parts)
    ):
        from ledger.identity.environment_identity import differing

        # A receipt without parts covered its files alone; the workload definition is
        # said in words (`definition_gap`), never as two digests.
        theirs = src.package.parts or {"files": src.package.digest}
        parts = [
            p
            for p in differing(theirs, dict(revision.package_parts))
            if not p.startswith("workload:")
        ]
        said = [*parts, *([gap] if gap is not None else [])]
        text = (
            f"{sid} on commit {src.commit[:12]}: the package identity differs in "
            f"{'; '.join(said) or 'its digest'}"
        )
    else:
        differs = {
            "commit": "another commit",
            "tree": "another commit and tree",
            "package": "another commit, tree and package digest",
        }[req.carry_over]
        text = f"{sid} is for {differs} ({src.commit[:12]})"
    return Reason(CARRY_OVER, text, r.id)


def stale(r: ReceiptEvidence, revision: Revision, req: Requirement) -> Reason:
    src = r.predicate.source
    why = {
        "commit": "the claim carries over by commit only",
        "tree": "its tree differs",
        "package": "its tree and package differ",
    }[req.carry_over]
    gap = definition_gap(r, revision) if req.carry_over != "commit" else None
    if gap is not None and (src.tree == revision.tree or _same_but_definition(r, revision)):
        # Its files are the revision's: the definition is what differs.
        why = gap
    return Reason(
        STALE_HEAD,
        f"{short_id(r.id)} {r.predicate.outcome} on earlier head {src.commit[:12]} of "
        f"PR #{src.pr}; {why}",
        r.id,
    )


# -- evidence policy ----------------------------------------------------------


def finished_at(r: ReceiptEvidence) -> dt.datetime:
    return dt.datetime.fromisoformat(r.predicate.runner.finished.replace("Z", "+00:00"))


def _age(seconds: float) -> str:
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= n:
            return f"{seconds / n:.1f}{unit}"
    return f"{seconds:.0f}s"


def aged(r: ReceiptEvidence, req: Requirement, now: dt.datetime) -> Reason | None:
    """Where the plan sets evidence_max_age: a receipt that finished longer ago."""
    if req.max_age_s is None:
        return None
    age = (now - finished_at(r)).total_seconds()
    if age <= req.max_age_s:
        return None
    return Reason(
        EVIDENCE_AGE,
        f"{short_id(r.id)} {r.predicate.outcome} {_age(age)} ago (finished "
        f"{r.predicate.runner.finished}); the plan's evidence_max_age is {req.max_age}",
        r.id,
    )


def other_code(r: ReceiptEvidence, revision: Revision) -> bool:
    """`r` was recorded for another commit than a pull request's own, and not for that
    pull request (its base branch's, or another pull request's code)."""
    src = r.predicate.source
    return revision.pr is not None and src.commit != revision.commit and src.pr != revision.pr


def unconfirmed(r: ReceiptEvidence, req: Requirement, heads: int) -> Reason:
    src = r.predicate.source
    where = f"PR #{src.pr}" if src.pr is not None else "the base branch"
    return Reason(
        BASE_CONFIRMATION,
        f"{short_id(r.id)} failed on {src.commit[:12]} ({where}, not this pull request's "
        f"code); failures of the claim stand on {heads} distinct commit(s), the plan's "
        f"base_counterexample_heads is {req.base_heads}: it does not block yet",
        r.id,
    )


def quarantined_run(r: ReceiptEvidence, quarantined: frozenset[str]) -> Reason | None:
    """A receipt from a quarantined GPU whose health snapshot is not clean."""
    runner = r.predicate.runner
    sick = sorted(set(runner.gpu_uuids) & quarantined)
    health = runner.environment.get("gpu_health", "")
    if not sick or health.startswith("clean"):
        return None
    return Reason(
        QUARANTINE,
        f"{short_id(r.id)} ran on quarantined GPU {', '.join(sick)} and its health snapshot "
        f"is not clean ({health or 'none recorded'}); it counts neither way",
        r.id,
    )


# -- integrity ----------------------------------------------------------------


def integrity(r: ReceiptEvidence) -> list[Reason]:
    """Signature, revocation and role problems: any one makes `r` count for nothing."""
    sid = short_id(r.id)
    out: list[Reason] = []
    if r.problem:
        out.append(Reason(SIGNATURE, f"{sid}: {r.problem}", r.id))
    if r.revoked:
        out.append(
            Reason(
                KEY_REVOKED,
                f"{sid} was logged at seq {r.seq}, after key {r.signer[:12]} was revoked "
                f"at seq {r.signer_revoked_seq}",
                r.id,
            )
        )
    if r.revocation is not None and r.revocation.effective:
        out.append(
            Reason(
                RECEIPT_REVOKED,
                f"{sid} {r.revocation.text()} (revocation at seq {r.revocation.seq}, "
                f"{r.revocation.authority})",
                r.id,
            )
        )
    if r.signer_role != "runner":
        out.append(
            Reason(
                SIGNER_ROLE, f"{sid} is signed by a {r.signer_role!r} key, not a runner key", r.id
            )
        )
    return out


def dirty(r: ReceiptEvidence) -> Reason | None:
    if not r.predicate.source.dirty:
        return None
    return Reason(
        DIRTY_TREE,
        f"{short_id(r.id)} ran on a dirty work tree of {r.predicate.source.commit[:12]}; "
        f"it identifies no commit",
        r.id,
    )


# -- outcomes -----------------------------------------------------------------

# Per-arm records of an A/B comparison, as a list or table under one key
# (`arm_gpu_uuids`) or as one key per arm (`base_gpu_uuid`, `candidate_gpu_uuid`,
# as the shipped gradient comparison writes them). Arms that differ here were
# not compared under the same conditions, so neither a pass nor a failure
# attributes anything.
_ARM_FACTS = (
    ("different GPUs", "arm_gpu_uuids", "gpu_uuid"),
    ("different starting reserved bytes", "arm_start_reserved_bytes", "reserved_at_start_bytes"),
)
_ARMS = ("base", "candidate")


def effective_outcome(r: ReceiptEvidence) -> tuple[Outcome, Reason | None]:
    """The outcome the engine counts, with the downgrades applied: a failure a later
    version of its check no longer makes (`check_fixes`), an A/B whose arms differ."""
    p = r.predicate
    if p.outcome not in ("passed", "failed"):
        return p.outcome, None
    fixed = superseded_by_fix(r)
    if fixed is not None:
        return "inconclusive", fixed
    differing = [
        why
        for why, table, suffix in _ARM_FACTS
        if _differ(_arm_values(p.measurements, table, suffix))
    ]
    if not differing:
        return p.outcome, None
    return "inconclusive", Reason(
        COMPARISON_ARMS,
        f"{short_id(r.id)} {p.outcome}, but its arms ran on {' and '.join(differing)}: "
        f"inconclusive",
        r.id,
    )


def superseded_by_fix(r: ReceiptEvidence) -> Reason | None:
    """Where a later version of `r`'s check removed the only failure it holds: the
    reason every surface gives (rule `supersession`: it no longer stands as a
    counterexample, and counts as inconclusive)."""
    text = check_fix(r)
    return None if text is None else Reason(SUPERSESSION, f"{short_id(r.id)} {text}", r.id)


def check_fix(r: ReceiptEvidence) -> str | None:
    """The sentence saying `check_fixes` supersedes `r` ("superseded by the check's fix:
    ..."), or None where it does not."""
    p = r.predicate
    fix = check_fixes.fixed_by(
        p.check.name, p.check.version, p.check.parameters, p.outcome, p.reason, p.measurements
    )
    return None if fix is None else check_fixes.superseded_text(fix, p.check.version)


def _arm_values(measurements: Mapping[str, JsonValue], table: str, suffix: str) -> list[JsonValue]:
    arms = measurements.get(table)
    if isinstance(arms, dict):
        return list(arms.values())
    if isinstance(arms, list):
        return list(arms)
    return [measurements[f"{arm}_{suffix}"] for arm in _ARMS if f"{arm}_{suffix}" in measurements]


def _differ(values: Iterable[JsonValue]) -> bool:
    return len({json.dumps(v, sort_keys=True) for v in values}) > 1


def outcome_reason(r: ReceiptEvidence, rule: str) -> Reason:
    p = r.predicate
    sid = short_id(r.id)
    why = f" ({p.reason})" if p.reason else ""
    texts = {
        INFRA_ERROR: f"{sid} is an infrastructure failure{why}; it counts neither way",
        REFUSAL: f"{sid} refused{why}; a refusal is neither a failure of the claim nor "
        f"proof of infeasibility",
        INCONCLUSIVE: f"{sid} inconclusive{why}",
        COUNTEREXAMPLE: f"{sid} failed{why}",
    }
    return Reason(rule, texts[rule], r.id)


# -- requirements on a pass ---------------------------------------------------


def planned_check(r: ReceiptEvidence, req: Requirement) -> Reason | None:
    """The pass ran the plan's check with (at least) the plan's parameters."""
    if req.check is None:
        return None
    check = r.predicate.check
    sid = short_id(r.id)
    if check.name != req.check:
        return Reason(
            PLANNED_CHECK, f"{sid} ran check {check.name!r}; the plan requires {req.check!r}", r.id
        )
    profile = r.predicate.scope.get("profile")
    params = req.profile_params.get(profile, req.params) if isinstance(profile, str) else req.params
    for key, want in params.items():
        got = check.parameters.get(key)
        if key not in check.parameters or _canon(got) != _canon(want):
            shown = _canon(got) if key in check.parameters else "nothing"
            return Reason(
                PLANNED_CHECK,
                f"{sid} ran {check.name!r} with {key}={shown}; the plan requires "
                f"{key}={_canon(want)}",
                r.id,
            )
    return None


def _canon(value: JsonValue | None) -> str:
    # Exact JSON identity: True, 1 and 1.0 are different parameter values.
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def sandboxed(r: ReceiptEvidence, req: Requirement) -> Reason | None:
    """Where the plan requires a sandbox: a pass whose scope does not name one."""
    if not req.sandbox:
        return None
    mode = r.predicate.scope.get("sandbox")
    if mode is not None and mode != "none":
        return None
    said = "sandbox=none" if mode == "none" else "no sandbox facet"
    return Reason(
        SANDBOX,
        f"{short_id(r.id)} ran unsandboxed ({said}); the plan requires a sandbox",
        r.id,
    )


def cleanup_proof(r: ReceiptEvidence, req: Requirement) -> Reason | None:
    if not req.cleanup:
        return None
    cleanup = r.predicate.cleanup
    sid = short_id(r.id)
    if cleanup is None:
        return Reason(CLEANUP_PROOF, f"{sid} has no cleanup proof", r.id)
    if not cleanup.complete:
        held = [f"{x.kind} {x.id}" for x in cleanup.resources if not x.released]
        what = f": not released: {', '.join(held)}" if held else ""
        return Reason(CLEANUP_PROOF, f"{sid} cleanup is incomplete{what}", r.id)
    return None


def controls(control: ReceiptEvidence, check: str) -> bool:
    """`control` is an observer-off run of `check` (same check name, or the
    dedicated observer-off-control check whose parameter `check` names it)."""
    p = control.predicate
    if p.observer != "off":
        return False
    if p.check.name == check:
        return True
    return p.check.name == OBSERVER_OFF_CONTROL_CHECK and p.check.parameters.get("check") == check


def covers_receipt(outer: ReceiptEvidence, inner: ReceiptEvidence) -> bool:
    """`outer` was at least as specific as `inner`, on the same values."""
    return covers(outer.predicate.scope, inner.predicate.scope)
