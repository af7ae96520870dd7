"""What a claim's exit adds to its results, as the parent sees it.

The claim's process measures and proves its own releases, but only the
parent sees it exit: GPU memory the process held until then (its CUDA
context) is proven returned by NVML after the exit, and the process itself
joins the cleanup proof. A claim that dies or runs out of time ends with no
evidence of its own, but that is its own outcome (its code can crash, exit or
hang at will): a `failed` result that says how; only the parent's reading of a
device fault makes it an `infra-error` (`ledger.fleet.faults.judge`). A rank
stopped because a peer failed contributes no evidence (the merge leads with
the peer's failure).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from runners.checks.cleanup import decide as decide_cleanup
from runners.claim.ranks import merge_ranks
from runners.contract.result import CheckResult, CleanupProof, ReleasedResource, infra_error
from runners.harness import nvml
from runners.harness.launch import RankExit
from runners.harness.proofs import CUDA_TOLERANCE_BYTES

__all__ = [
    "GpuState",
    "cleanup_verdict",
    "died",
    "exit_release",
    "merged",
    "stopped_after_peer",
    "timed_out",
    "with_exit_proof",
]

EXIT_BASIS = "cleanup proof including the claim process's exit"

GpuState = tuple[dict[str, int], set[int]]


def exit_release(
    before: GpuState | None,
    pids: list[int],
    uuids: Sequence[str] | None = None,
    *,
    shared: bool = False,
    shown: bool = True,
) -> tuple[bool, str] | None:
    """Whether the claim processes' GPU memory was returned when they exited, and the
    observation; on ``uuids`` only (the claim's own GPUs) when given, since claims on
    the other GPUs of the host run meanwhile. ``shared``: other claims ran on its
    device too, so the device's used memory is recorded but proves nothing: the claim's
    processes gone from NVML's compute processes is the proof, and only where NVML
    ``shown`` them while they ran (in some containers it lists no process at all).

    Read from the parent, which never creates a CUDA context, so NVML shows the
    children's memory and then its absence."""
    after = nvml.devices_used()
    if before is None or after is None:
        return None
    used0, _ = before
    if uuids:
        mine = {nvml.normalise_uuid(u) for u in uuids}
        used0 = {u: b for u, b in used0.items() if nvml.normalise_uuid(u) in mine}
    used1, seen_pids = after
    deltas = {u: used1.get(u, 0) - used0.get(u, 0) for u in used0}
    left = [p for p in pids if p in seen_pids]
    judged = shown if shared else all(d <= CUDA_TOLERANCE_BYTES for d in deltas.values())
    ok = not left and judged
    seen = ", ".join(f"{u}: {d:+d} bytes" for u, d in sorted(deltas.items()))
    who = ", ".join(map(str, pids))
    where = f"pid {', '.join(map(str, left))} still in" if left else "absent from"
    return ok, (
        f"after the claim runner (pid {who}) exited: {where} NVML's compute processes; "
        + (
            f"device used vs before it started: {seen} (not judged: the device was shared "
            "with other claims)"
            + ("" if shown else "; NVML never listed its processes: their absence proves nothing")
            if shared
            else f"device used vs before it started: {seen} (tolerance {CUDA_TOLERANCE_BYTES})"
        )
    )


def with_exit_proof(
    proof: CleanupProof, own: list[ReleasedResource], at_exit: tuple[bool, str] | None
) -> CleanupProof:
    """Add the child process to the proof; GPU memory the child still held when
    it measured itself (the CUDA context, lazily loaded kernels) counts as
    released only when NVML shows it returned after the child exited."""
    resources = []
    for r in proof.resources:
        if r.kind == "gpu-memory" and not r.released and at_exit is not None and at_exit[0]:
            r = ReleasedResource(
                kind=r.kind,
                id=r.id,
                released=True,
                proof=f"held by the claim process until it exited ({r.proof}); {at_exit[1]}",
            )
        resources.append(r)
    resources.extend(own)
    if at_exit is not None and own:
        resources.append(
            ReleasedResource(
                kind="gpu-process-memory", id=own[-1].id, released=at_exit[0], proof=at_exit[1]
            )
        )
    return CleanupProof(
        complete=all(r.released for r in resources),
        resources=resources,
        tolerance_bytes=proof.tolerance_bytes,
    )


def cleanup_verdict(r: CheckResult) -> None:
    """The `cleanup` check's verdict, decided on the whole proof: the observations
    after the claim process exited included."""
    decide_cleanup(r, basis=EXIT_BASIS)


def died(
    *, claim: str, check: str, device: str, params: Any, pid: int, how: str, tail: str, started: int
) -> CheckResult:
    """A claim process that ended without a result: failed, with how it ended and the
    tail of what it wrote (its own text, escaped where shown)."""
    return _failed(
        claim=claim,
        check=check,
        version="unknown",
        params=dict(params or {}),
        scope={"device_kind": device},
        reason=f"{how} without a result: {tail or 'no output'}"[:2000],
        cleanup=CleanupProof(
            complete=False,
            resources=[
                ReleasedResource(
                    kind="owned-by-claim-process",
                    id=str(pid),
                    released=False,
                    proof="the claim process ended before proving the release of what it owned",
                )
            ],
        ),
        started_ns=started,
        finished_ns=time.time_ns(),
    )


def timed_out(
    *,
    claim: str,
    check: str,
    device: str,
    params: Any,
    timeout_s: float,
    started: int,
    ranks: list[int],
) -> CheckResult:
    """A claim that outran its time limit: a hang is the claim's own outcome (failed),
    unless the parent reads a device fault meanwhile."""
    which = f" (still running: rank {', '.join(map(str, ranks))})" if len(ranks) > 0 else ""
    return _failed(
        claim=claim,
        check=check,
        version="unknown",
        params=dict(params or {}),
        scope={"device_kind": device},
        reason=f"timed out after {timeout_s:g} s{which}; the claim's process group was killed",
        started_ns=started,
        finished_ns=time.time_ns(),
    )


def _failed(**kw: Any) -> CheckResult:
    r = infra_error(**kw)
    r.outcome = "failed"
    return r


def stopped_after_peer(like: CheckResult, e: RankExit, culprit: int) -> CheckResult:
    """What a rank stopped after its peer ``culprit`` failed contributes: no evidence."""
    return infra_error(
        claim=like.claim,
        check=like.check,
        version=like.check_version,
        params=like.params,
        scope=like.scope,
        reason=f"stopped after rank {culprit} ended with {like.outcome}; it {e.how()}",
        started_ns=like.started_ns,
        finished_ns=time.time_ns(),
    )


def merged(
    per_rank: list[list[CheckResult]],
    *,
    cuda: bool,
    grouped: bool,
    at_exit: tuple[bool, str] | None,
    lead: int | None,
) -> list[CheckResult]:
    if not grouped:
        return per_rank[0]
    # Each rank's proof and verdict first, with what was seen after the ranks exited
    # (communicator and context memory is returned only then), then the merge.
    for rs in per_rank:
        for r in rs:
            r.cleanup = with_exit_proof(r.cleanup, [], at_exit)
            cleanup_verdict(r)
    return [merge_ranks(list(rs), cuda=cuda, lead=lead) for rs in zip(*per_rank, strict=True)]
