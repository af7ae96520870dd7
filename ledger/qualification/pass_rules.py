"""The rules on what a claim's requirement asks of a pass: the plan's check and
parameters, a sandbox, a cleanup proof, and which receipts are observer-off controls
of a check and cover another's scope. Their names, `Reason` and `Requirement` are
the catalogue's (`rules.py`).
"""

from __future__ import annotations

import json

from pydantic import JsonValue

from ledger.qualification.evidence import ReceiptEvidence, short_id
from ledger.qualification.plan import OBSERVER_OFF_CONTROL_CHECK
from ledger.qualification.rules import CLEANUP_PROOF, PLANNED_CHECK, SANDBOX, Reason, Requirement
from ledger.qualification.scope import covers

__all__ = ["cleanup_proof", "controls", "covers_receipt", "planned_check", "sandboxed"]


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
