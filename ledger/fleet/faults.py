"""Faults in a GPU's health readings, and which of them the code under test cannot
cause (docs/checks.md, "Infrastructure or code").

A failure (an OOM included) on a device that shows a fault the code cannot
cause is an `infra-error` naming the fault; a fault the code can cause (an
illegal memory access) leaves it a counterexample; with a clean snapshot it
stays one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runners.contract.result import Stamped

__all__ = [
    "CODE_XIDS",
    "INFRA_XIDS",
    "Fault",
    "faults_of",
    "judge",
    "summary",
]

INFRA_XIDS = {
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping event",
    64: "ECC page retirement or row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}
"""XIDs that hardware, firmware or the driver raise whatever the code does."""

CODE_XIDS = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup, due to previous errors",
    69: "graphics engine class error",
}
"""XIDs an application causes (an illegal address, a kernel that faulted): evidence
against the code as much as the device."""

_HW_SLOWDOWN = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")


@dataclass(frozen=True, slots=True)
class Fault:
    uuid: str
    what: str
    infra: bool
    """True: the code under test cannot cause it."""
    code: bool = False
    """True: an XID the code can cause (counts toward quarantine only when it recurs
    under other pull requests)."""

    def __str__(self) -> str:
        return f"{self.what} on {self.uuid}"


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _device_faults(dev: Mapping[str, Any]) -> list[Fault]:
    uuid = str(dev.get("uuid", ""))
    before: Mapping[str, Any] = dev.get("before") or {}
    after: Mapping[str, Any] = dev.get("after") or {}
    out: list[Fault] = []

    def add(what: str, infra: bool, code: bool = False) -> None:
        out.append(Fault(uuid, what, infra, code))

    seen = [r for r in (before, after) if r]
    vol = max((_int(r.get("ecc_volatile_uncorrected")) or 0 for r in seen), default=0)
    if vol:
        add(f"{vol} uncorrectable ECC error(s) since the driver loaded", True)
    agg0 = _int(before.get("ecc_aggregate_uncorrected"))
    agg1 = _int(after.get("ecc_aggregate_uncorrected"))
    if agg0 is not None and agg1 is not None and agg1 > agg0:
        add(f"{agg1 - agg0} uncorrectable ECC error(s) while the claim ran", True)
    elif not vol and (agg1 or agg0):
        add(f"{agg1 or agg0} uncorrectable ECC error(s) in the device's lifetime", False)
    for r in seen[-1:]:
        if r.get("remapped_rows_failed") == "yes":
            add("a row remap failed", True)
        if r.get("remapped_rows_pending") == "yes":
            add("a row remap is pending (the GPU needs a reset)", True)
        if r.get("retired_pages_pending") == "yes":
            add("a page retirement is pending", True)
        unc = _int(r.get("remapped_rows_uncorrectable")) or 0
        if unc:
            add(f"{unc} row(s) remapped for uncorrectable errors", False)
        dbe = _int(r.get("retired_pages_dbe")) or 0
        if dbe:
            add(f"{dbe} page(s) retired for double-bit errors", False)
        reasons = r.get("clock_event_reasons")
        slow = [x for x in _HW_SLOWDOWN if isinstance(reasons, list) and x in reasons]
        if slow:
            add(f"clocks held down by {', '.join(slow)}", False)
    xids = dev.get("xids")
    for x in xids if isinstance(xids, list) else []:
        if x in INFRA_XIDS:
            add(f"XID {x} ({INFRA_XIDS[x]})", True)
        elif x in CODE_XIDS:
            add(f"XID {x} ({CODE_XIDS[x]})", False, code=True)
        else:
            add(f"XID {x}", False)
    diag = dev.get("dcgm_diag")
    if isinstance(diag, Mapping) and diag.get("result") == "fail":
        add(f"dcgmi diag -r {diag.get('level', 1)} failed before the claims", True)
    return out


def faults_of(health: Mapping[str, Any] | None) -> list[Fault]:
    """Every fault the health document shows, device by device."""
    if not health:
        return []
    return [f for dev in health.get("devices") or [] for f in _device_faults(dev)]


def summary(health: Mapping[str, Any] | None) -> str:
    """One line for the receipt's ``runner.environment["gpu_health"]``."""
    if not health or health.get("error"):
        why = (health or {}).get("error") or "no GPU health read"
        return f"not measured: {why}"
    devices = health.get("devices") or []
    faults = faults_of(health)
    if not faults:
        return f"clean ({len(devices)} device(s))"
    infra = [f for f in faults if f.infra]
    rest = [f for f in faults if not f.infra]
    parts = []
    if infra:
        parts.append("infra fault: " + "; ".join(map(str, infra)))
    if rest:
        parts.append("fault: " + "; ".join(map(str, rest)))
    return " | ".join(parts)


def judge(results: Sequence[Stamped], health: Mapping[str, Any] | None) -> list[Stamped]:
    """The results judged by their GPUs' health, as new values (a stamped result is
    never changed in place): a failed result on a device with a fault the code cannot
    cause becomes an `infra-error` naming the fault (its check's reason kept after it);
    an `infra-error` names the fault too. Others stay as the check said."""
    infra = [f for f in faults_of(health) if f.infra]
    if not infra:
        return list(results)
    named = "; ".join(map(str, infra))
    out = []
    for r in results:
        if r.outcome not in ("failed", "infra-error"):
            out.append(r)
            continue
        said = f"the check said {r.outcome}: {r.reason}" if r.reason else f"was {r.outcome}"
        out.append(
            dataclasses.replace(
                r,
                outcome="infra-error",
                reason=f"GPU fault the code under test cannot cause: {named}; {said}",
            )
        )
    return out
