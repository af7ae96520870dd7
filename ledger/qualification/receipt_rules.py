"""The rules on a receipt's own standing, whatever it is asked for: its integrity
(signature, key and receipt revocation, signer role), a dirty work tree, a run on a
quarantined GPU, and the outcome the engine counts (a failure a later version of its
check removed, an A/B whose arms differ). Their names and `Reason` are the
catalogue's (`rules.py`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from pydantic import JsonValue

from ledger.evidence.models import Outcome
from ledger.qualification import check_fixes
from ledger.qualification.evidence import ReceiptEvidence, short_id
from ledger.qualification.rules import (
    COMPARISON_ARMS,
    COUNTEREXAMPLE,
    DIRTY_TREE,
    INCONCLUSIVE,
    INFRA_ERROR,
    KEY_REVOKED,
    QUARANTINE,
    RECEIPT_REVOKED,
    REFUSAL,
    SIGNATURE,
    SIGNER_ROLE,
    SUPERSESSION,
    Reason,
)

__all__ = [
    "check_fix",
    "dirty",
    "effective_outcome",
    "integrity",
    "outcome_reason",
    "quarantined_run",
    "superseded_by_fix",
]


# -- quarantine ---------------------------------------------------------------


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
