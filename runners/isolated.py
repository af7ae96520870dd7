"""Run one claim in a child process.

A check can leave the CUDA context unusable (after an out-of-memory at the
edge of the device, a sticky "unknown error" fails every later kernel in
the process). Running each claim in its own process keeps one check's broken
context from turning the next checks into false failures, and gives every
claim the same cold start. The child is a resource this module owns: it is
reaped, its process group is ended on Ctrl-C, and its exit is recorded in the
cleanup proof of every result it produced.

    python -m runners.isolated REQUEST.json RESULT.json   (the child side)
"""

from __future__ import annotations

import collections
import dataclasses
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runners.checks.cleanup import decide as cleanup_verdict
from runners.harness import child, nvml
from runners.harness.processes import stop_group, stop_popen
from runners.harness.proofs import CUDA_TOLERANCE_BYTES
from runners.result import CheckResult, CleanupProof, Json, ReleasedResource, infra_error
from runners.result import result_from_dict as _result_from

__all__ = ["run_claim_isolated"]

_STOP_GRACE_S = 10.0
_EXIT_BASIS = "cleanup proof including the claim process's exit"

GpuState = tuple[dict[str, int], set[int]]


def _exit_release(before: GpuState | None, pid: int) -> tuple[bool, str] | None:
    """Whether the child's GPU memory was returned when it exited, and the observation.

    Read from the parent, which never creates a CUDA context, so NVML shows the
    child's memory and then its absence."""
    after = nvml.devices_used()
    if before is None or after is None:
        return None
    used0, _ = before
    used1, pids = after
    deltas = {u: used1.get(u, 0) - used0.get(u, 0) for u in used0}
    ok = pid not in pids and all(d <= CUDA_TOLERANCE_BYTES for d in deltas.values())
    seen = ", ".join(f"{u}: {d:+d} bytes" for u, d in sorted(deltas.items()))
    where = "absent from" if pid not in pids else "still in"
    return ok, (
        f"after the claim runner (pid {pid}) exited: pid {where} NVML's compute processes; "
        f"device used vs before it started: {seen} (tolerance {CUDA_TOLERANCE_BYTES})"
    )


def _with_exit_proof(
    proof: CleanupProof, own: ReleasedResource, at_exit: tuple[bool, str] | None
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
    resources.append(own)
    if at_exit is not None:
        resources.append(
            ReleasedResource(
                kind="gpu-process-memory", id=own.id, released=at_exit[0], proof=at_exit[1]
            )
        )
    return CleanupProof(
        complete=all(r.released for r in resources),
        resources=resources,
        tolerance_bytes=proof.tolerance_bytes,
    )


def _cleanup_verdict(r: CheckResult) -> None:
    """The `cleanup` check's verdict, decided on the whole proof: the observations
    after the claim process exited included."""
    cleanup_verdict(r, basis=_EXIT_BASIS)


def _died(
    *, claim: str, check: str, device: str, params: Any, pid: int, rc: int, tail: str, started: int
) -> CheckResult:
    how = f"killed by signal {-rc}" if rc < 0 else f"exited with status {rc}"
    return infra_error(
        claim=claim,
        check=check,
        version="unknown",
        params=dict(params or {}),
        scope={"device_kind": device},
        reason=f"claim runner process {how} without a result: {tail or 'no output'}"[:2000],
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


def _follow(proc: subprocess.Popen[str], progress: Callable[[str], None]) -> tuple[int, str]:
    """Relay the child's progress until it exits; its status and last log lines."""
    tail: collections.deque[str] = collections.deque(maxlen=8)
    assert proc.stderr is not None
    for line in proc.stderr:
        line = line.rstrip("\n")
        msg = child.progress_line(line)
        if msg is not None:
            progress(msg)
        elif line.strip():
            tail.append(line)
    return proc.wait(), " | ".join(tail)


def run_claim_isolated(
    *, progress: Callable[[str], None], device: str, claim: str, check: str, **kwargs: Any
) -> list[CheckResult]:
    """`runners.api.run_claim` in a fresh child process; same arguments, same results.

    A child that dies without results (a crash, a signal) yields one
    infra-error result that says how it ended.
    """
    work = Path(tempfile.mkdtemp(prefix="ledger-claim-"))
    req, out = work / "request.json", work / "result.json"
    child.write_request(req, {"device": device, "claim": claim, "check": check, **kwargs})
    started = time.time_ns()
    gpu_before = nvml.devices_used()
    try:
        proc = subprocess.Popen(
            child.argv("runners.isolated", req, out),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=child.env(),
            start_new_session=True,  # its own process group, ended as a whole
        )
        try:
            rc, tail = _follow(proc, progress)
        except BaseException:
            stop_group(proc.pid, timeout_s=_STOP_GRACE_S)
            stop_popen(proc, timeout_s=_STOP_GRACE_S)
            raise
        gone, why = stop_popen(proc, timeout_s=_STOP_GRACE_S)
        own = ReleasedResource(kind="process", id=str(proc.pid), released=gone, proof=why)
        got = child.read_result(out) if rc == 0 else None
        if got is not None:
            results = [_result_from(d) for d in got]
        else:
            results = [
                _died(
                    claim=claim,
                    check=check,
                    device=device,
                    params=kwargs.get("params"),
                    pid=proc.pid,
                    rc=rc,
                    tail=tail,
                    started=started,
                )
            ]
        at_exit = _exit_release(gpu_before, proc.pid)
        for r in results:
            r.cleanup = _with_exit_proof(r.cleanup, own, at_exit)
            _cleanup_verdict(r)
        return results
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _serve(req: dict[str, Json]) -> list[dict[str, Any]]:
    from runners.api import run_claim

    base = req.pop("base_root", None)
    art = req.pop("artifact_dir", None)
    results = run_claim(
        progress=child.say,
        repo_root=Path(str(req.pop("repo_root"))),
        base_root=None if base is None else Path(str(base)),
        artifact_dir=None if art is None else Path(str(art)),
        **req,  # type: ignore[arg-type]
    )
    return [dataclasses.asdict(r) for r in results]


if __name__ == "__main__":
    sys.exit(child.serve(_serve))
