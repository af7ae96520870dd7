"""Whose failure is it: a blocker on a pull request's head, set beside the commit the
pull request branched from (its merge-base with the base branch, `source.base` in
the head's receipts) on the same device, at the scope the claim is asked at.

The answer is a label, read from signed receipts alone:

- ``introduced``: the base passes on the same device: this pull request brought it;
- ``base-too``: the base fails there too: not introduced here (its receipt named);
- ``device-only``: the base fails there too, and the same claim passes on another
  device: the device's, not the code's (the fleet counts the device's failures);
- ``base-unjudged``: the base's receipt there decides nothing (inconclusive,
  infra-error, refused): no attribution;
- ``no-base``: no receipt of the base for the claim on that device and scope.

The label explains; it never unblocks: a claim's state is what the head's
evidence says (`ledger.qualification.engine`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from ledger.evidence.models import QualificationPredicate
from ledger.qualification.evidence import ReceiptEvidence, short_id
from ledger.qualification.scope import covers

__all__ = [
    "BLAMED",
    "LABELS",
    "Attribution",
    "Label",
    "attribute",
    "device_of",
    "of_claim",
    "where_ran",
]

Label: TypeAlias = Literal["introduced", "base-too", "device-only", "base-unjudged", "no-base"]
LABELS: Mapping[Label, str] = {
    "introduced": "introduced by this pull request",
    "base-too": "fails on the base too: not introduced here",
    "device-only": "fails only on one device",
    "base-unjudged": "the base could not be judged there",
    "no-base": "no base receipt to compare with",
}
BLAMED = frozenset({"failed", "inconclusive"})
"""The head's outcomes a baseline is asked for."""
# How strongly a label speaks for the pull request's own fault, where the head failed
# on several devices: the strongest one is said.
_RANK: tuple[Label, ...] = ("introduced", "base-too", "device-only", "base-unjudged", "no-base")


@dataclass(frozen=True, slots=True)
class Attribution:
    claim: str
    label: Label
    text: str
    """One line, for people: the label and the evidence behind it."""
    base_commit: str
    device: str
    """Where the head's receipt ran (`device_of`)."""
    head_receipt: str
    base_receipt: str | None = None
    """The base's receipt on the same device, where there is one."""
    passes_on: str | None = None
    """For ``device-only``: a device the same claim passes on."""

    def to_json(self) -> dict[str, Any]:
        return {
            "claim": self.claim,
            "label": self.label,
            "label_text": LABELS[self.label],
            "text": self.text,
            "base_commit": self.base_commit,
            "device": self.device,
            "head_receipt": self.head_receipt,
            "base_receipt": self.base_receipt,
            "passes_on": self.passes_on,
        }


def device_of(r: ReceiptEvidence) -> str:
    """The device a receipt ran on (`where_ran`)."""
    return where_ran(r.predicate)


def where_ran(p: QualificationPredicate) -> str:
    """The device a receipt's claim ran on, as the host observed it: its GPUs' UUIDs,
    else the host's CPU (a claim on CPU runs on whatever cores its host has)."""
    uuids = sorted(p.runner.gpu_uuids)
    return ",".join(uuids) if uuids else f"cpu of {p.runner.host or 'an unrecorded host'}"


def _gpu(device: str) -> str:
    """A device as people read it: NVML's UUIDs already say `GPU-`."""
    return device if device.startswith(("cpu of ", "GPU-", "MIG-")) else f"GPU {device}"


def _counts(r: ReceiptEvidence) -> bool:
    """A receipt a baseline may stand on: signed by a standing runner key."""
    return r.problem is None and not r.revoked and r.signer_role == "runner"


def _newest_on(receipts: Sequence[ReceiptEvidence], device: str) -> ReceiptEvidence | None:
    found = [r for r in receipts if device_of(r) == device]
    return max(found, key=lambda r: r.seq) if found else None


def _one(
    claim: str,
    head: ReceiptEvidence,
    base: Sequence[ReceiptEvidence],
    passes: Sequence[ReceiptEvidence],
    fleet: Mapping[str, str],
) -> Attribution:
    base_commit = str(head.predicate.source.base)
    device = device_of(head)
    b = _newest_on(base, device)
    at = f"the base {base_commit[:12]}"
    where = _gpu(device)
    if b is None:
        return Attribution(
            claim,
            "no-base",
            f"{LABELS['no-base']}: no receipt of {at} for this claim on {where} at this "
            "scope (`ledger qualify` runs it there unless --no-baseline)",
            base_commit,
            device,
            head.id,
        )
    said = f"receipt {short_id(b.id)}"
    outcome = b.predicate.outcome
    if outcome == "passed":
        text = f"{LABELS['introduced']}: {at} passes on the same device ({where}; {said})"
        return Attribution(claim, "introduced", text, base_commit, device, head.id, b.id)
    if outcome != "failed":
        text = f"{LABELS['base-unjudged']}: {at} is {outcome} on {where} ({said}): not attributed"
        return Attribution(claim, "base-unjudged", text, base_commit, device, head.id, b.id)
    other = next((p for p in passes if device_of(p) != device), None)
    if other is not None and not device.startswith("cpu of "):
        elsewhere = device_of(other)
        counted = "; ".join(
            f"{u}: {fleet[u]}" if "," in device else fleet[u]
            for u in device.split(",")
            if u in fleet
        )
        text = (
            f"fails only on {where}: {at} fails there too ({said}); the same claim passes "
            f"on {_gpu(elsewhere)} (receipt {short_id(other.id)})"
            + (f"; the fleet counts {counted}" if counted else "")
        )
        return Attribution(
            claim, "device-only", text, base_commit, device, head.id, b.id, elsewhere
        )
    text = f"{LABELS['base-too']} ({at} fails on {where}: {said})"
    return Attribution(claim, "base-too", text, base_commit, device, head.id, b.id)


def of_claim(
    p: QualificationPredicate, claim: str, check: str | None, scope: Mapping[str, str | int]
) -> bool:
    """A receipt of ``claim``'s own check (not an observer-off control's runs) at the
    scope it is asked at: what a baseline compares, when it is run and when it is read."""
    return p.claim == claim and (check is None or p.check.name == check) and covers(p.scope, scope)


def attribute(
    claim: str,
    check: str | None,
    scope: Mapping[str, str | int],
    head: Sequence[ReceiptEvidence],
    base: Sequence[ReceiptEvidence],
    fleet: Mapping[str, str] | None = None,
) -> Attribution | None:
    """The label of a blocking claim, from its receipts on the head's commit (``head``)
    and on the commit it branched from (``base``), both of this repository; None where
    the head has no failed or inconclusive receipt that names its merge-base. ``fleet``:
    per device, what the fleet counts there (only read for ``device-only``)."""

    def mine(r: ReceiptEvidence) -> bool:
        # Signed by a standing runner, of the claim at its scope.
        return _counts(r) and of_claim(r.predicate, claim, check, scope)

    blamed = [
        r for r in head if mine(r) and r.predicate.outcome in BLAMED and r.predicate.source.base
    ]
    if not blamed:
        return None
    base_of = {r.predicate.source.base for r in blamed}
    ours = [r for r in base if mine(r) and r.predicate.source.commit in base_of]
    passes = [r for r in (*head, *ours) if mine(r) and r.predicate.outcome == "passed"]
    # One label per device the head failed on (its newest receipt there); the one that
    # speaks most for the pull request's own fault is said.
    newest: dict[str, ReceiptEvidence] = {}
    for r in sorted(blamed, key=lambda r: r.seq):
        newest[device_of(r)] = r
    labels = [
        _one(
            claim,
            r,
            [b for b in ours if b.predicate.source.commit == r.predicate.source.base],
            passes,
            fleet or {},
        )
        for r in newest.values()
    ]
    return min(labels, key=lambda a: _RANK.index(a.label))
