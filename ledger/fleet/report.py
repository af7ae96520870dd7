"""`ledger fleet`: flaky devices told from flaky claims, from the receipts themselves.

Per GPU UUID and per host: the claims run there, their failures and
infrastructure errors, the receipts whose health snapshot shows a fault, and
a Wilson lower bound (95 %) of two rates: failures (failed or infra-error)
per claim run, and device faults per claim run. The same per claim sits
beside them: a claim that fails on every device is the code's; a device that
fails every claim is the device's.

A device fault is what the health evidence lays at the device's door: a
fault the code cannot cause, or an XID the code can cause (13, 31, 43, ...)
once it has appeared under two or more pull requests (one pull request's
illegal memory access is that pull request's). Quarantine (`quarantined`)
takes devices whose fault-rate lower bound exceeds a bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ledger.fleet.faults import CODE_XIDS

if TYPE_CHECKING:
    from ledger.store.store import Store

__all__ = [
    "QUARANTINE_ENV",
    "Tally",
    "fleet_report",
    "quarantined",
    "receipt_faults",
    "store_predicates",
    "wilson_lower",
]

QUARANTINE_ENV = "LEDGER_QUARANTINE_ABOVE"
"""The runner setting: quarantine devices whose fault-rate lower bound exceeds it."""

Z = 1.959963984540054
"""The normal quantile of a two-sided 95 % interval."""


def wilson_lower(k: int, n: int, z: float = Z) -> float:
    """The Wilson score interval's lower bound for ``k`` events in ``n`` trials (0 for
    none): small samples are not read as certain."""
    if n <= 0:
        return 0.0
    p = k / n
    z2 = z * z
    centre = p + z2 / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, (centre - spread) / (1 + z2 / n))


@dataclass(frozen=True, slots=True)
class ReceiptFault:
    uuid: str
    what: str
    infra: bool
    code_xid: bool


def receipt_faults(gpu_health: str) -> list[ReceiptFault]:
    """The faults a receipt's ``gpu_health`` line names, each with its device."""
    out: list[ReceiptFault] = []
    for part in gpu_health.split(" | "):
        infra = part.startswith("infra fault: ")
        if not infra and not part.startswith("fault: "):
            continue
        for item in part.split(": ", 1)[1].split("; "):
            what, _, uuid = item.rpartition(" on ")
            xid = what.split(" ")[1] if what.startswith("XID ") else ""
            code = xid.isdigit() and int(xid) in CODE_XIDS
            out.append(ReceiptFault(uuid, what, infra, code))
    return out


@dataclass
class Tally:
    runs: int = 0
    failures: int = 0
    infra_errors: int = 0
    health_faults: int = 0
    """Receipts whose health snapshot named a fault here."""
    device_faults: int = 0
    """Receipts with a fault laid at the device's door (see the module)."""
    hosts: set[str] = field(default_factory=set)

    def doc(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "failures": self.failures,
            "infra_errors": self.infra_errors,
            "health_faults": self.health_faults,
            "device_faults": self.device_faults,
            "failure_rate_lower": round(
                wilson_lower(self.failures + self.infra_errors, self.runs), 6
            ),
            "fault_rate_lower": round(wilson_lower(self.device_faults, self.runs), 6),
        }


@dataclass(frozen=True, slots=True)
class _Seen:
    uuids: list[str]
    host: str
    claim: str
    outcome: str
    faults: list[ReceiptFault]
    who: str
    """The pull request (or commit) whose code ran."""


def _seen(p: Mapping[str, Any]) -> _Seen:
    runner = p.get("runner") or {}
    env = runner.get("environment") or {}
    src = p.get("source") or {}
    who = f"pr {src['pr']}" if src.get("pr") is not None else str(src.get("commit", ""))[:12]
    return _Seen(
        uuids=[str(u) for u in runner.get("gpu_uuids") or []],
        host=str(runner.get("host") or ""),
        claim=str(p.get("claim") or ""),
        outcome=str(p.get("outcome") or ""),
        faults=receipt_faults(str(env.get("gpu_health") or "")),
        who=who,
    )


def fleet_report(predicates: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Per device, host and claim, from receipts' predicates (as signed)."""
    seen = [_seen(p) for p in predicates]
    # Code-causable XIDs count against a device once two pull requests saw them there.
    code_by: dict[str, set[str]] = {}
    for r in seen:
        for f in r.faults:
            if f.code_xid:
                code_by.setdefault(f.uuid, set()).add(r.who)
    recurring = {u for u, whos in code_by.items() if len(whos) >= 2}
    devices: dict[str, Tally] = {}
    hosts: dict[str, Tally] = {}
    claims: dict[str, Tally] = {}
    for r in seen:
        blamed = {f.uuid for f in r.faults if f.infra or (f.code_xid and f.uuid in recurring)}
        named = {f.uuid for f in r.faults}
        rows = [(devices.setdefault(u, Tally()), {u}) for u in r.uuids]
        rows += [(hosts.setdefault(r.host, Tally()), set(r.uuids))]
        rows += [(claims.setdefault(r.claim, Tally()), set(r.uuids))]
        for t, where in rows:
            t.hosts.add(r.host)
            t.runs += 1
            t.failures += r.outcome == "failed"
            t.infra_errors += r.outcome == "infra-error"
            t.health_faults += bool(named & where)
            t.device_faults += bool(blamed & where)
    return {
        "devices": [
            {"uuid": u, "hosts": sorted(t.hosts), **t.doc()} for u, t in sorted(devices.items())
        ],
        "hosts": [{"host": h, **t.doc()} for h, t in sorted(hosts.items())],
        "claims": [{"claim": c, **t.doc()} for c, t in sorted(claims.items())],
    }


def store_predicates(store: Store) -> list[dict[str, Any]]:
    """Every receipt's predicate whose signer stands (registered runner, not revoked),
    in log order; an entry that does not read counts for nothing (`ledger audit`)."""
    from ledger.evidence.errors import Error
    from ledger.transparency.logged import standing

    keys = store.keys()
    out = []
    for e in store.entries(kinds=["receipt"]):
        try:
            if standing(e, keys) is None:
                out.append(e.receipt.predicate.model_dump(mode="json"))
        except Error:
            continue
    return out


def quarantined(report: Mapping[str, Any], above: float) -> dict[str, float]:
    """The devices whose fault-rate lower bound exceeds ``above``, with that bound."""
    return {
        d["uuid"]: d["fault_rate_lower"]
        for d in report.get("devices") or []
        if d["fault_rate_lower"] > above
    }
