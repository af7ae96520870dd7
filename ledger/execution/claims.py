"""The plan claims a run runs: those another command records (`ledger import`,
`ledger run`) left out, each checked against the runners' checks before anything runs,
and why a claim's receipt will not be at the scope the plan asks, said before it runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from ledger.evidence.errors import InputError
from ledger.execution.devices import Device as GpuDevice
from ledger.execution.devices import gpu_model
from ledger.qualification.plan import ClaimSpec, Plan

__all__ = ["asked_claims", "recorded_outside", "scope_notes", "to_run"]

Device = Literal["auto", "cpu", "cuda"]


def recorded_outside() -> dict[str, str]:
    """Checks whose receipts come from outside qualify, and the command that records them."""
    from ledger.importers import CHECKS
    from ledger.write.run import CHECK

    return {**{c: "ledger import" for c in CHECKS}, CHECK: "ledger run"}


def to_run(plan: Plan, claims: Sequence[str]) -> list[ClaimSpec]:
    """The plan claims this run will run (`asked_claims` checks them, once the runners are
    loaded): what the fork servers launched before that prepare for."""
    outside = recorded_outside()
    return [c for c in plan.claims if (not claims or c.name in claims) and c.check not in outside]


def asked_claims(
    plan: Plan,
    claims: Sequence[str],
    known: Sequence[str],
    params_error: Callable[[str, dict[str, Any]], str | None],
) -> tuple[list[ClaimSpec], list[tuple[ClaimSpec, str]]]:
    """The plan claims to run, each checked before anything runs, and those left out
    because `ledger import` or `ledger run` records them (with that command): skipped
    from the whole plan, refused when asked for by name."""
    unknown = sorted(set(claims) - {c.name for c in plan.claims})
    if unknown:
        raise InputError(f"claims not in the plan: {', '.join(unknown)}")
    outside = recorded_outside()
    asked, skipped = [], []
    for c in plan.claims:
        if claims and c.name not in claims:
            continue
        if c.check in outside:
            if claims:
                raise InputError(
                    f"plan claim {c.name}: check {c.check!r} is recorded by "
                    f"`{outside[c.check]}`, not run by qualify"
                )
            skipped.append((c, outside[c.check]))
            continue
        if c.check not in known:
            raise InputError(f"plan claim {c.name}: unknown check {c.check!r} ({', '.join(known)})")
        # A misspelt parameter would otherwise run the check with its default.
        bad = params_error(c.check, dict(c.params))
        if bad:
            raise InputError(f"plan claim {c.name}: {bad}")
        asked.append(c)
    return asked, skipped


def scope_notes(claim: ClaimSpec, device: Device, gpus: Sequence[GpuDevice]) -> list[str]:
    """Why this run's receipt will not be at the scope the plan asks of ``claim``, said
    before it runs."""
    want = claim.scope
    notes = []
    cuda = device == "cuda" or (device == "auto" and bool(gpus))
    have = "cuda" if cuda else "cpu"
    kind = want.get("device_kind")
    if kind is not None and kind != have:
        why = "no GPU is visible" if have == "cpu" and device == "auto" else f"--device {device}"
        notes.append(f"its scope asks device_kind={kind}; this run is on {have} ({why})")
    model = want.get("gpu_model")
    names = {gpu_model(g) for g in gpus if g.uuid}
    if model is not None and cuda and names and model not in names:
        notes.append(f"its scope asks gpu_model={model}; this host has {', '.join(sorted(names))}")
    return notes
