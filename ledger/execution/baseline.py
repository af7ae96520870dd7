"""The baseline of a pull request's blockers: each claim that failed or was
inconclusive on the head, judged on the commit the pull request branched from
(its merge-base with the base branch) on the same device.

A receipt the ledger already holds of that commit, for the same claim, at the
claim's scope and on the same device, is reused; otherwise the claim runs there,
by the same machinery as the head's claims (a worktree of the commit, its fork
server, the same sandbox, the claim's own deadline) and is recorded as a receipt
of that commit, which a later run then reuses. What the two say together is the
read side's to label (`ledger.qualification.attribution`); nothing here changes
a claim's state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import git

from ledger.evidence.errors import Error
from ledger.evidence.keys import LocalKey
from ledger.execution import local_run
from ledger.execution.claimrun import ClaimRun
from ledger.execution.devices import Device as GpuDevice
from ledger.execution.devices import visible_gpus
from ledger.identity.revision import Revision
from ledger.qualification.attribution import BLAMED, of_claim, vouches, where_ran
from ledger.qualification.evidence import ReceiptEvidence, short_id
from ledger.qualification.plan import ClaimSpec, Plan
from ledger.read.handle import OpenLedger
from ledger.read.question import Question
from ledger.read.reader import Reader
from ledger.sandbox import Sandbox

COULD_NOT_RUN = "could_not_run"
"""The measurement of a check that could not run as asked with what it was handed
(`runners.checks.context.COULD_NOT_RUN`; the core reads it without the runners)."""

__all__ = ["BaseRow", "baseline"]


@dataclass(frozen=True, slots=True)
class BaseRow:
    """One claim's baseline: the receipt of the base commit it stands on."""

    receipt: str
    claim: str
    outcome: str
    commit: str
    reused: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.receipt,
            "claim": self.claim,
            "outcome": self.outcome,
            "commit": self.commit,
            "reused": self.reused,
        }


def _receipts(
    reader: Reader, repo: str, commit: str, claims: Sequence[str]
) -> list[ReceiptEvidence]:
    """The ledger's receipts of ``commit`` for ``claims`` whose runner key stands, read
    through the ledger's reader in one go: the local store's, or a server's in one
    request (`POST /v1/evidence`), never one request per receipt."""
    got = reader.evidence(Question.about(repo, commit, claims)).receipts
    return [r for r in got if r.problem is None and r.predicate.source.commit == commit]


def _mine(r: ReceiptEvidence, spec: ClaimSpec, head: ReceiptEvidence) -> bool:
    """A base receipt the read side will weigh beside ``head`` (`attribution`): of the
    claim at its scope, on the head's device, by the head's runner."""
    p = r.predicate
    return (
        of_claim(p, spec.name, spec.check, spec.scope)
        and where_ran(p) == where_ran(head.predicate)
        and vouches(head, r)
    )


def baseline(
    repo: git.Repo,
    head: Revision,
    plan: Plan,
    runs: Sequence[ClaimRun],
    recorded: Sequence[tuple[str, str, str]],
    ledger: OpenLedger,
    key: LocalKey,
    box: Sandbox,
    explicit: bool,
    say: Callable[[str], None],
) -> list[BaseRow]:
    """Judge the head's blockers among ``recorded`` on the commit ``head`` branched from:
    reuse the ledger's receipt there, else run the claim (``runs``, built for the head,
    with the base tree's workload definition ``plan``) on the device the head's ran on
    (``explicit``: the run placed claims on named devices)."""
    blamed = list(dict.fromkeys(c for _, c, o in recorded if o in BLAMED))
    if not blamed:
        return []
    base = head.base
    if base is None or base == head.commit:
        say("baseline: the head has no merge-base with the base branch apart from itself: none")
        return []
    at = base[:12]
    try:
        mine = _head_receipts(ledger.reader, head, recorded)
        found = _receipts(ledger.reader, head.repo, base, blamed)
    except Error as e:
        # Said, never silent: without the head's receipts read back, no device is known.
        say(f"baseline: the ledger at {ledger.where} could not be read ({e.reason()}): none")
        return []
    out: list[BaseRow] = []
    todo: dict[str, list[ClaimRun]] = {}
    for claim in blamed:
        spec = plan.claim(claim)
        run = next((r for r in runs if r.claim == claim), None)
        if spec is None or run is None:
            continue
        held = mine.get(claim)
        if held is None:
            say(f"baseline: {claim}: its receipt on the head could not be read back: none")
            continue
        cannot = held.predicate.measurements.get(COULD_NOT_RUN)
        if cannot:
            # What it was handed, not the code: the base would be handed the same.
            say(f"baseline: {claim}: not run on the base: it could not run here ({cannot})")
            continue
        device = where_ran(held.predicate)
        have = [r for r in found if _mine(r, spec, held)]
        if have:
            r = max(have, key=lambda r: r.seq)
            say(
                f"baseline: {claim}: the base {at} is {r.predicate.outcome} on the same device "
                f"(receipt {short_id(r.id)}, reused)"
            )
            out.append(BaseRow(r.id, claim, r.predicate.outcome, base, True))
            continue
        todo.setdefault(device, []).append(run)
    if not todo:
        return out
    from ledger.plans.governing import identify

    ident = identify(repo, rev=base, for_statement=True, offline=True)
    # A receipt of the base commit itself, from a clean worktree: it belongs to no PR.
    revision = dataclasses.replace(ident.revision, dirty=False, pr=None)
    for device, group in todo.items():
        names = ", ".join(r.claim for r in group)
        say(f"baseline: running {names} on the base {at} ({_where(device)})")
        specs = [s for r in group if (s := plan.claim(r.claim)) is not None]
        rows: list[tuple[str, str, str]] = []
        with local_run.started(repo, revision, plan, specs, box) as st:
            local_run.run(
                st,
                [_on_base(r, i, plan, head) for i, r in enumerate(group, 1)],
                ledger,
                key,
                revision,
                _devices(device) if explicit else None,
                box,
                lambda m: say(f"baseline: {m}"),
                rows,
            )
        out += [BaseRow(i, c, o, base, False) for i, c, o in rows]
    return out


def _on_base(run: ClaimRun, index: int, plan: Plan, head: Revision) -> ClaimRun:
    """The head's claim run as the base's: the base tree's workload definition, and its
    receipt saying so and which head it was judged for."""
    spec = plan.claim(run.claim)
    assert spec is not None  # the caller only passes the plan's claims
    sources = {k: v for k, v in run.sources.items() if k == "plan_source"} | {
        "workload_source": f"qualification.toml at base {head.base}: workload, "
        "workload_params, preload",
        "baseline_for": f"the head {head.commit}" + (f" of PR #{head.pr}" if head.pr else ""),
    }
    return dataclasses.replace(
        run,
        index=index,
        workload_ref=plan.workload_for(spec) or "",
        workload_params=dict(plan.workload_params_for(spec)),
        sources=sources,
    )


def _where(device: str) -> str:
    return "the same device" if device.startswith("cpu of ") else f"the same device, {device}"


def _devices(device: str) -> list[GpuDevice] | None:
    """The host's devices a head receipt ran on, by UUID (None on a CPU: the default)."""
    if device.startswith("cpu of "):
        return None
    want = device.split(",")
    have = {d.uuid: d for d in visible_gpus()}
    got = [have[u] for u in want if u in have]
    return got if len(got) == len(want) else None


def _head_receipts(
    reader: Reader, head: Revision, recorded: Sequence[tuple[str, str, str]]
) -> dict[str, ReceiptEvidence]:
    """Per blocked claim, its receipt (this run's) read back from the ledger it was
    recorded into: the device it ran on, as the host observed it, and its signer."""
    ids = {i for i, _, o in recorded if o in BLAMED}
    claims = sorted({c for _, c, _ in recorded})
    return {
        r.predicate.claim: r
        for r in _receipts(reader, head.repo, head.commit, claims)
        if r.id in ids
    }
