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
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from runners.result import Artifact, CheckResult, CleanupProof, Json, ReleasedResource

__all__ = ["run_claim_isolated"]

_PROGRESS = "\x1eprogress "
_STOP_GRACE_S = 10.0
# Same allowance as the in-process harness on CUDA (runners.checks.base).
_EXIT_TOLERANCE_BYTES = 64 * 1024 * 1024


def _gpu_state() -> tuple[dict[str, int], set[int]] | None:
    """Device-wide used bytes per GPU UUID and the pids holding GPU memory (NVML).

    Read from the parent, which never creates a CUDA context, so it sees the
    child's memory and then its absence. None where NVML is not available.
    """
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no driver, no library: nothing to observe on this host
        return None
    used: dict[str, int] = {}
    pids: set[int] = set()
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        uuid = pynvml.nvmlDeviceGetUUID(h)
        used[uuid.decode() if isinstance(uuid, bytes) else str(uuid)] = int(
            pynvml.nvmlDeviceGetMemoryInfo(h).used
        )
        pids.update(int(p.pid) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h))
    return used, pids


def _exit_release(
    before: tuple[dict[str, int], set[int]] | None, pid: int
) -> tuple[bool, str] | None:
    """Whether the child's GPU memory was returned when it exited, and the observation."""
    after = _gpu_state()
    if before is None or after is None:
        return None
    used0, _ = before
    used1, pids = after
    deltas = {u: used1.get(u, 0) - used0.get(u, 0) for u in used0}
    ok = pid not in pids and all(d <= _EXIT_TOLERANCE_BYTES for d in deltas.values())
    seen = ", ".join(f"{u}: {d:+d} bytes" for u, d in sorted(deltas.items()))
    where = "absent from" if pid not in pids else "still in"
    return ok, (
        f"after the claim runner (pid {pid}) exited: pid {where} NVML's compute processes; "
        f"device used vs before it started: {seen} (tolerance {_EXIT_TOLERANCE_BYTES})"
    )


def _result_from(d: Mapping[str, Any]) -> CheckResult:
    c = d["cleanup"]
    return CheckResult(
        **{
            **d,
            "cleanup": CleanupProof(
                complete=c["complete"],
                resources=[ReleasedResource(**r) for r in c["resources"]],
                tolerance_bytes=c["tolerance_bytes"],
            ),
            "artifacts": [Artifact(**a) for a in d["artifacts"]],
        }
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
    """The `cleanup` check's verdict is its proof: decide it on the whole proof,
    the observations after the claim process exited included."""
    if r.check != "cleanup" or r.outcome not in ("passed", "failed"):
        return
    left = [f"{x.kind} {x.id}" for x in r.cleanup.resources if not x.released]
    r.measurements["verdict_basis"] = "cleanup proof including the claim process's exit"
    if r.cleanup.complete:
        r.outcome, r.reason = "passed", None
    else:
        r.outcome, r.reason = "failed", "cleanup incomplete: not released: " + ", ".join(left)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _stop(proc: subprocess.Popen[str]) -> None:
    """End the child's whole process group: TERM, then KILL after a grace period."""
    for sig, wait_s in ((signal.SIGTERM, _STOP_GRACE_S), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def run_claim_isolated(
    *, progress: Callable[[str], None], device: str, claim: str, check: str, **kwargs: Any
) -> list[CheckResult]:
    """`runners.api.run_claim` in a fresh child process; same arguments, same results.

    A child that dies without results (a crash, a signal) yields one
    infra-error result that says how it ended.
    """
    work = Path(tempfile.mkdtemp(prefix="ledger-claim-"))
    request = {"device": device, "claim": claim, "check": check, **kwargs}
    req, out = work / "request.json", work / "result.json"
    req.write_text(json.dumps(request, default=str))
    tail: collections.deque[str] = collections.deque(maxlen=8)
    started = time.time_ns()
    gpu_before = _gpu_state()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runners.isolated", str(req), str(out)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group, ended as a whole
        )
        try:
            assert proc.stderr is not None
            for line in proc.stderr:
                line = line.rstrip("\n")
                if line.startswith(_PROGRESS):
                    progress(line.removeprefix(_PROGRESS))
                elif line.strip():
                    tail.append(line)
            rc = proc.wait()
        except BaseException:
            _stop(proc)
            raise
        own = ReleasedResource(
            kind="process",
            id=str(proc.pid),
            released=_gone(proc.pid),
            proof=f"claim runner exited with status {rc} and was reaped; "
            "os.kill(pid, 0) raised ProcessLookupError",
        )
        if rc == 0 and out.is_file():
            results = [_result_from(d) for d in json.loads(out.read_text())]
        else:
            how = f"killed by signal {-rc}" if rc < 0 else f"exited with status {rc}"
            last = " | ".join(tail) or "no output"
            results = [
                CheckResult(
                    claim=claim,
                    check=check,
                    check_version="unknown",
                    params=dict(kwargs.get("params") or {}),
                    scope={"device_kind": "cuda" if device == "cuda" else device},
                    outcome="infra-error",
                    reason=f"claim runner process {how} without a result: {last}"[:2000],
                    measurements={},
                    observer="off",
                    cleanup=CleanupProof(
                        complete=False,
                        resources=[
                            ReleasedResource(
                                kind="owned-by-claim-process",
                                id=str(proc.pid),
                                released=False,
                                proof="the claim process ended before proving the release "
                                "of what it owned",
                            )
                        ],
                    ),
                    started_ns=started,
                    finished_ns=time.time_ns(),
                )
            ]
        at_exit = _exit_release(gpu_before, proc.pid)
        for r in results:
            r.cleanup = _with_exit_proof(r.cleanup, own, at_exit)
            _cleanup_verdict(r)
        return results
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _child(request_path: str, result_path: str) -> int:
    from runners.api import run_claim

    req: dict[str, Json] = json.loads(Path(request_path).read_text())

    def say(msg: str) -> None:
        print(_PROGRESS + msg.replace("\n", " "), file=sys.stderr, flush=True)

    base = req.pop("base_root", None)
    art = req.pop("artifact_dir", None)
    results = run_claim(
        progress=say,
        repo_root=Path(str(req.pop("repo_root"))),
        base_root=None if base is None else Path(str(base)),
        artifact_dir=None if art is None else Path(str(art)),
        **req,  # type: ignore[arg-type]
    )
    tmp = Path(result_path + ".part")
    tmp.write_text(json.dumps([dataclasses.asdict(r) for r in results]))
    tmp.replace(result_path)
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], sys.argv[2]))
