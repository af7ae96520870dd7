"""Whose failure is it: a blocker on a pull request's head, set beside the commit the
pull request branched from (its merge-base with the base branch the run named,
`source.base` in the head's receipts, the branch beside it as `base_branch` in the
runner environment) on the same device, at the scope the claim is asked at.

Every base receipt there is weighed, not only the newest, and only those the head's
runner vouches for (`same_runner`: the head's own key, or a key the same token
holder registered): another runner's key never decides whose failure it is. The
answer is a label, read from signed receipts alone:

- ``introduced``: the base passes on the same device: this pull request brought it;
- ``base-too``: the base fails there too: not introduced here (its receipts named);
- ``device-only``: the base fails there too, and the same claim passes on another
  device: the device's, not the code's (the fleet counts the device's failures);
- ``base-unjudged``: the base's receipts there decide nothing (inconclusive,
  infra-error, refused), or both pass and fail: no attribution;
- ``no-base``: no receipt of the base for the claim on that device and scope.

``base-too`` and ``device-only`` are `INHERITED`: such a blocker has its own next step
(`next_step`), is counted apart under the headline and makes a GitHub check ask for
action instead of failing, where every blocker is one.

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
    "INHERITED",
    "LABELS",
    "Attribution",
    "Label",
    "attribute",
    "device_of",
    "next_step",
    "of_claim",
    "same_runner",
    "vouches",
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
INHERITED = frozenset({"base-too", "device-only"})
"""Labels of a failure already on the base: not this pull request's to fix."""
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
    base_branch: str | None = None
    """The branch ``base_commit`` is the branch point on, as the head's receipt recorded
    it (None: a receipt from before it was recorded, set beside the default branch)."""
    base_receipts: tuple[str, ...] = ()
    """Every base receipt weighed on the device (``base_receipt`` is the newest)."""

    @property
    def inherited(self) -> bool:
        """Already on the base: the pull request did not bring it (`INHERITED`)."""
        return self.label in INHERITED

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
            "base_branch": self.base_branch,
            "base_receipts": list(self.base_receipts),
            "inherited": self.inherited,
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


def same_runner(head: tuple[str, str | None], base: tuple[str, str | None]) -> bool:
    """Whether a base receipt's signer (key id, the token holder who registered it or
    None) may speak beside a head receipt's: the same runner key, or a key the same
    token holder registered (a runner that rotated its key). Another runner's key never
    decides whose failure a head's is: a key that could sign a failed base receipt
    would otherwise clear any pull request's own failure."""
    return base[0] == head[0] or (head[1] is not None and base[1] == head[1])


def vouches(head: ReceiptEvidence, base: ReceiptEvidence) -> bool:
    """`same_runner`, of two receipts the ledger holds."""
    return same_runner(
        (head.signer, head.signer_registered_by), (base.signer, base.signer_registered_by)
    )


def _on(receipts: Sequence[ReceiptEvidence], head: ReceiptEvidence) -> list[ReceiptEvidence]:
    """The base receipts weighed beside ``head``: on its device, by a key it vouches for."""
    device = device_of(head)
    return sorted(
        (r for r in receipts if device_of(r) == device and vouches(head, r)),
        key=lambda r: r.seq,
    )


def _ids(receipts: Sequence[ReceiptEvidence]) -> str:
    many = len(receipts) > 1
    return f"receipt{'s' if many else ''} " + ", ".join(short_id(r.id) for r in receipts)


def _one(
    claim: str,
    head: ReceiptEvidence,
    base: Sequence[ReceiptEvidence],
    passes: Sequence[ReceiptEvidence],
    fleet: Mapping[str, str],
) -> Attribution:
    base_commit = str(head.predicate.source.base)
    device = device_of(head)
    branch = head.predicate.runner.environment.get("base_branch") or None
    weighed = _on(base, head)
    at = f"the base {base_commit[:12]}"
    # Which base it is, said last: the branch point on the branch the run named, or, for
    # a receipt from before that was recorded, its merge-base with the default branch.
    which = (
        f"; the base is the branch point on {branch}"
        if branch
        else "; the base is the merge-base with the default branch (the head's receipt "
        "names no base branch)"
    )
    where = _gpu(device)

    def said(
        label: Label, text: str, newest: ReceiptEvidence | None = None, **more: Any
    ) -> Attribution:
        return Attribution(
            claim,
            label,
            text + which,
            base_commit,
            device,
            head.id,
            newest.id if newest is not None else None,
            base_branch=branch,
            base_receipts=tuple(r.id for r in weighed),
            **more,
        )

    if not weighed:
        return said(
            "no-base",
            f"{LABELS['no-base']}: no receipt of {at} for this claim on {where} at this "
            "scope by the head's runner (`ledger qualify` runs it there unless --no-baseline)",
        )
    # Every base receipt there is weighed, not only the newest: a pass and a failure of
    # the same code on the same device say the base is not settled, and blame no one.
    passed = [r for r in weighed if r.predicate.outcome == "passed"]
    failed = [r for r in weighed if r.predicate.outcome == "failed"]
    newest = weighed[-1]
    if passed and failed:
        text = (
            f"{LABELS['base-unjudged']}: {at} both passes ({_ids(passed)}) and fails "
            f"({_ids(failed)}) on {where}: not attributed"
        )
        return said("base-unjudged", text, newest)
    if passed:
        text = f"{LABELS['introduced']}: {at} passes on the same device ({where}; {_ids(passed)})"
        return said("introduced", text, passed[-1])
    if not failed:
        outcome = newest.predicate.outcome
        text = (
            f"{LABELS['base-unjudged']}: {at} is {outcome} on {where} ({_ids(weighed)}): "
            "not attributed"
        )
        return said("base-unjudged", text, newest)
    b = failed[-1]
    other = next((p for p in passes if device_of(p) != device), None)
    if other is not None and not device.startswith("cpu of "):
        elsewhere = device_of(other)
        counted = "; ".join(
            f"{u}: {fleet[u]}" if "," in device else fleet[u]
            for u in device.split(",")
            if u in fleet
        )
        text = (
            f"fails only on {where}: {at} fails there too ({_ids(failed)}); the same claim "
            f"passes on {_gpu(elsewhere)} (receipt {short_id(other.id)})"
            + (f"; the fleet counts {counted}" if counted else "")
        )
        return said("device-only", text, b, passes_on=elsewhere)
    text = f"{LABELS['base-too']} ({at} fails on {where}: {_ids(failed)})"
    return said("base-too", text, b)


def next_step(a: Attribution, target: str) -> str:
    """What to do about a failure already on the base: it is fixed there (or the base's
    receipt reviewed), never by changing this pull request; the gate still holds."""
    if a.label == "device-only":
        return (
            f"`ledger fleet` (the device {_gpu(a.device)} fails the base too), then "
            f"`ledger qualify {target} --claim {a.claim}` on another device"
        )
    on = f" on {a.base_branch}" if a.base_branch else ""
    return (
        f"fix it{on} (the base {a.base_commit[:12]} fails it too: not this pull "
        f"request's change), then rebase and `ledger qualify {target} --claim {a.claim}`"
    )


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
