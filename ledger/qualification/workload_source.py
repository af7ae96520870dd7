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

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import JsonValue

from ledger.evidence.canonical import canonical_bytes
from ledger.qualification.adapters import adapter_version
from ledger.qualification.plan import ClaimSpec, Plan

__all__ = [
    "definition",
    "definition_changes",
    "definition_digest",
    "differences",
    "gate_changed",
    "names_definition",
    "workload_changed",
    "workload_from",
]


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


# -- the definition as identity ------------------------------------------------


def names_definition(plan: Plan | None) -> bool:
    """Whether `plan` names a workload definition: an entry point or factory arguments,
    plan-wide, per claim or per profile. A plan naming none leaves the package identity
    as it was (the files, lock files and distributions alone)."""
    if plan is None:
        return False
    return bool(
        plan.workload
        or plan.workload_params
        or any(c.workload or c.workload_params for c in plan.claims)
        or any(
            p.workload_params or any(pc.workload_params for pc in p.claims.values())
            for p in plan.profiles.values()
        )
    )


def definition(
    plan: Plan | None, versions: Callable[[str | None], str | None] = adapter_version
) -> dict[str, JsonValue] | None:
    """The workload definition `plan` resolves to (None: it names none): per claim its
    entry point and factory arguments (the plan's updated by the claim's: the model, its
    config, dtype, the estimator it names), the same under each profile, and the version
    of each ready adapter that interprets them (`versions`: today's, or those a receipt
    recorded before versions were named ran under; `ledger.qualification.adapters`).
    What only speeds imports (`preload`) is not in it: it changes nothing computed."""
    if plan is None or not names_definition(plan):
        return None
    claims: dict[str, JsonValue] = {
        c.name: {"workload": plan.workload_for(c), "workload_params": plan.workload_params_for(c)}
        for c in plan.claims
    }
    profiles: dict[str, JsonValue] = {}
    for name in sorted(plan.profiles):
        sized = plan.with_profile(name)
        profiles[name] = {c.name: sized.workload_params_for(c) for c in sized.claims}
    refs = sorted({r for c in plan.claims if (r := plan.workload_for(c))})
    adapters: dict[str, JsonValue] = {r: v for r in refs if (v := versions(r)) is not None}
    return {"claims": claims, "profiles": profiles, "adapters": adapters}


def definition_digest(
    plan: Plan | None, versions: Callable[[str | None], str | None] = adapter_version
) -> str | None:
    """sha256 hex over the canonical JSON of `definition(plan)`; None: it names none."""
    doc = definition(plan, versions)
    return None if doc is None else hashlib.sha256(canonical_bytes(doc)).hexdigest()


def definition_changes(
    was: Plan | None,
    now: Plan | None,
    was_versions: Callable[[str | None], str | None] = adapter_version,
) -> list[str]:
    """How the workload definition differs from `was` (its adapters at `was_versions`)
    to `now` (each resolved), one `key: was -> now` line per difference, the same change
    to several claims said once: the entry point and factory arguments (`differences`),
    a profile's, an adapter's version. [] where they agree."""
    a, b = definition(was, was_versions), definition(now)
    if a == b:
        return []
    if a is None or b is None:
        return [
            "the workload definition: "
            + ("none named" if a is None else "named")
            + " -> "
            + ("none named" if b is None else "named")
        ]
    assert was is not None and now is not None
    out: list[str] = []
    for c in was.claims:
        hc = now.claim(c.name)
        if hc is None:
            continue
        for line in differences(was, now.model_copy(update={"preload": was.preload}), c):
            if line not in out:
                out.append(line)
    pa, pb = a["profiles"], b["profiles"]
    assert isinstance(pa, dict) and isinstance(pb, dict)
    for name in sorted(set(pa) | set(pb)):
        sized_a, sized_b = pa.get(name), pb.get(name)
        if not isinstance(sized_a, dict) or not isinstance(sized_b, dict):
            out.append(f"profile {name}: {'added' if sized_a is None else 'removed'}")
            continue
        for claim in sorted(set(sized_a) & set(sized_b)):
            lines: list[str] = []
            _diff("workload_params", sized_a[claim], sized_b[claim], lines)
            # A plan-wide change shows under every profile too: said once, above.
            for line in lines:
                said = f"profile {name}: {line}"
                if line not in out and said not in out:
                    out.append(said)
    va, vb = a["adapters"], b["adapters"]
    assert isinstance(va, dict) and isinstance(vb, dict)
    for ref in sorted(set(va) & set(vb)):
        if va[ref] != vb[ref]:
            out.append(f"adapter {ref}: version {_json(va[ref])} -> {_json(vb[ref])}")
    if not out:
        # The claims differ in what the gate's claims do not name (a claim only one has).
        _diff("claims", a["claims"], b["claims"], out)
    return out
