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

Each key speaks only for its hosts (`ledger.write.hosts`): the fleet counts a
receipt only where its key speaks for the host it names, a GPU only for the host
that declares it (else the first host whose receipts named it), and never a
failure the baseline attributed to the pull request ("introduced by this pull
request": the base passes on the same device), which is the code's, not the
device's. Otherwise one registered key could name another host's GPUs with bad
health, or one pull request break a device on purpose, and quarantine it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ledger.fleet.faults import CODE_XIDS

if TYPE_CHECKING:
    from ledger.evidence.entry import LoggedEntry
    from ledger.evidence.keys import KeyInfo
    from ledger.evidence.models import QualificationPredicate
    from ledger.store.store import Store

__all__ = [
    "INTRODUCED",
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

INTRODUCED = "_introduced"
"""The fleet's own mark on a predicate it was handed (never signed): the baseline
attributed this failure to the pull request, so the device is not blamed for it."""

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
    introduced: bool = False
    """The baseline attributed its failure to the pull request (`INTRODUCED`)."""


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
        introduced=bool(p.get(INTRODUCED)),
    )


def fleet_report(predicates: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Per device, host and claim, from receipts' predicates (as signed)."""
    seen = [_seen(p) for p in predicates]
    # Code-causable XIDs count against a device once two pull requests saw them there.
    code_by: dict[str, set[str]] = {}
    for r in seen:
        for f in r.faults:
            if f.code_xid and not r.introduced:
                code_by.setdefault(f.uuid, set()).add(r.who)
    recurring = {u for u, whos in code_by.items() if len(whos) >= 2}
    devices: dict[str, Tally] = {}
    hosts: dict[str, Tally] = {}
    claims: dict[str, Tally] = {}
    for r in seen:
        blamed = {f.uuid for f in r.faults if f.infra or (f.code_xid and f.uuid in recurring)}
        named = {f.uuid for f in r.faults}
        # A failure the pull request brought is its claim's, never its device's or host's.
        mine = not r.introduced
        rows = [(devices.setdefault(u, Tally()), {u}, mine) for u in r.uuids]
        rows += [(hosts.setdefault(r.host, Tally()), set(r.uuids), mine)]
        rows += [(claims.setdefault(r.claim, Tally()), set(r.uuids), True)]
        for t, where, counts in rows:
            t.hosts.add(r.host)
            t.runs += 1
            t.failures += counts and r.outcome == "failed"
            t.infra_errors += counts and r.outcome == "infra-error"
            t.health_faults += counts and bool(named & where)
            t.device_faults += counts and bool(blamed & where)
    return {
        "devices": [
            {"uuid": u, "hosts": sorted(t.hosts), **t.doc()} for u, t in sorted(devices.items())
        ],
        "hosts": [{"host": h, **t.doc()} for h, t in sorted(hosts.items())],
        "claims": [{"claim": c, **t.doc()} for c, t in sorted(claims.items())],
    }


def store_predicates(store: Store) -> list[dict[str, Any]]:
    """Every receipt's predicate the fleet counts, in log order: its signer stands
    (registered runner, not revoked) and speaks for the host it names; of its GPUs only
    those of that host (declared there, else first named there); a failure the
    baseline attributed to the pull request marked `INTRODUCED`. An entry that does
    not read counts for nothing (`ledger audit`)."""
    from ledger.evidence.errors import Error
    from ledger.transparency.logged import standing
    from ledger.write.hosts import registry

    keys = store.keys()
    standing_: list[tuple[LoggedEntry, QualificationPredicate]] = []
    recorded: dict[str, set[str]] = {}
    for e in store.entries(kinds=["receipt"]):
        try:
            if standing(e, keys) is not None:
                continue
            p = e.receipt.predicate
        except Error:
            continue
        standing_.append((e, p))
        if p.runner.host:
            recorded.setdefault(e.signer, set()).add(p.runner.host)
    # Every receipt was read here already: a key registered before binding speaks for
    # the hosts these name (less those its operator removed since).
    hosts = registry(store, keys, recorded=recorded)
    kept = []
    for e, p in standing_:
        bound = hosts.of(e.signer)
        if p.runner.host and (bound is None or not bound.speaks_for(p.runner.host)):
            continue  # a host its key does not speak for (or no longer does)
        kept.append((e, p))
    owner = {u: min(hs) for u, hs in hosts.owners.items() if len(hs) == 1}
    for _, p in kept:
        for u in p.runner.gpu_uuids:
            if p.runner.host:
                owner.setdefault(u, p.runner.host)
    introduced = _introduced(kept, keys)
    out = []
    for e, p in kept:
        doc = p.model_dump(mode="json")
        here = p.runner.host
        doc["runner"]["gpu_uuids"] = [u for u in p.runner.gpu_uuids if owner.get(u) == here]
        if e.entry_id in introduced:
            doc[INTRODUCED] = True
        out.append(doc)
    return out


def _introduced(
    kept: Sequence[tuple[LoggedEntry, QualificationPredicate]], keys: Mapping[str, KeyInfo]
) -> set[str]:
    """The failed or inconclusive receipts whose baseline says the pull request brought
    the failure (`ledger.qualification.attribution`: the base passes on the same
    device, by the same runner)."""
    from ledger.qualification.attribution import BLAMED, attribute
    from ledger.qualification.evidence import ReceiptEvidence

    def evidence(e: LoggedEntry) -> ReceiptEvidence:
        k = keys[e.signer]
        return ReceiptEvidence(
            id=e.entry_id,
            seq=e.seq,
            statement=e.receipt,
            signer=e.signer,
            signer_role=k.role,
            signer_revoked_seq=k.revoked_seq,
            signer_registered_by=k.registered_by,
        )

    heads = [
        (e, p)
        for e, p in kept
        if p.outcome in BLAMED and p.source.base and p.source.base != p.source.commit
    ]
    if not heads:
        return set()
    by: dict[tuple[str, str, str], list[ReceiptEvidence]] = {}
    bases = {(p.source.repo, str(p.source.base), p.claim) for _, p in heads}
    for e, p in kept:
        at = (p.source.repo, p.source.commit, p.claim)
        if at in bases:
            by.setdefault(at, []).append(evidence(e))
    out = set()
    for e, p in heads:
        base = by.get((p.source.repo, str(p.source.base), p.claim), [])
        found = attribute(p.claim, p.check.name, dict(p.scope), [evidence(e)], base)
        if found is not None and found.label == "introduced":
            out.add(e.entry_id)
    return out


def quarantined(report: Mapping[str, Any], above: float) -> dict[str, float]:
    """The devices whose fault-rate lower bound exceeds ``above``, with that bound."""
    return {
        d["uuid"]: d["fault_rate_lower"]
        for d in report.get("devices") or []
        if d["fault_rate_lower"] > above
    }
