"""What is judged comes from the head; how it is judged, from the base.

A pull request's workload definition (the plan's `workload`, `workload_params`,
`preload`, and each claim's `workload` and `workload_params`: the model, its config,
LoRA, dtype, attention, the estimator it names) is code under test, read from the
head's `qualification.toml` as the workload module is read from the head's tree (and
from the base's for the base's arms). The claims, their checks, parameters,
thresholds and required scopes stay the base's: a pull request never relaxes its own
gate, and never has its model change go untested either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ledger.qualification.plan import ClaimSpec, Plan

__all__ = ["differences", "gate_changed", "workload_changed", "workload_from"]


def workload_from(gate: Plan, head: Plan | None) -> Plan:
    """`gate` (the base's plan) with the workload definition of `head` (the head's plan;
    None: the head has none, and the base's stands). A claim the head no longer names
    keeps its own definition from the base, under the head's plan-wide one."""
    if head is None:
        return gate
    claims = []
    for c in gate.claims:
        h = head.claim(c.name)
        claims.append(
            c
            if h is None
            else c.model_copy(
                update={"workload": h.workload, "workload_params": dict(h.workload_params)}
            )
        )
    return gate.model_copy(
        update={
            "workload": head.workload,
            "workload_params": dict(head.workload_params),
            "preload": tuple(head.preload),
            "claims": tuple(claims),
        }
    )


def differences(base: Plan, head: Plan, claim: ClaimSpec) -> list[str]:
    """How `claim`'s workload definition differs between `base` and `head` (each a plan
    whose claims share names), one `key: base -> head` line each; [] where they agree."""
    hc = head.claim(claim.name) or claim
    out: list[str] = []
    b_ref, h_ref = base.workload_for(claim), head.workload_for(hc)
    if b_ref != h_ref:
        out.append(f"workload: {b_ref} -> {h_ref}")
    _diff("workload_params", base.workload_params_for(claim), head.workload_params_for(hc), out)
    if tuple(base.preload) != tuple(head.preload):
        out.append(f"preload: {list(base.preload)} -> {list(head.preload)}")
    return out


def _diff(at: str, a: Any, b: Any, out: list[str]) -> None:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for k in sorted(set(a) | set(b)):
            _diff(f"{at}.{k}", a.get(k, _ABSENT), b.get(k, _ABSENT), out)
        return
    if a != b or type(a) is not type(b):
        out.append(f"{at}: {_text(a)} -> {_text(b)}")


class _Absent:
    def __repr__(self) -> str:
        return "(none)"


_ABSENT: Any = _Absent()


def _text(v: Any) -> str:
    return repr(v) if isinstance(v, _Absent) else _json(v)


def _json(v: Any) -> str:
    import json

    return json.dumps(v, sort_keys=True)


def workload_changed(base: Plan | None, head: Plan | None) -> bool:
    """Whether the head's plan changes the workload definition."""
    if base is None or head is None:
        return False
    return any(differences(base, workload_from(base, head), c) for c in base.claims)


def gate_changed(base: Plan | None, head: Plan | None) -> bool:
    """Whether the head's plan changes anything but the workload definition: claims,
    checks, parameters, thresholds, scopes, carry-over, the runner's rules ...
    (proposed, never applied to the pull request that proposes it)."""
    if base is None or head is None:
        return base is not head
    return workload_from(head, base) != base
