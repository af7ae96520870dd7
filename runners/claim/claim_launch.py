"""A claim's launch, from the parent's side: its folder, each rank's request, command
line and environment (forked from the fork server, or started afresh inside the
sandbox), and what is given back once it ended (`Launch.close`). Where the claim
cannot start (short of disk, a sandbox whose self-test reached something) the host's
own result says why: none of its code ran.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ledger.sandbox import quota
from ledger.sandbox.proof import SandboxBreach
from runners.contract.names import DEVICE_SHARED_VAR
from runners.contract.request import ClaimRequest
from runners.contract.result import CheckResult
from runners.fork.forkclient import CGROUP_VAR, REFUSAL_VAR, REFUSED, STRICT_VAR
from runners.fork.forkparent import ForkServer
from runners.harness import child, nvml
from runners.harness.cgroup import ClaimCgroup
from runners.harness.launch import RankGroup
from runners.harness.outside import read_note

if TYPE_CHECKING:
    from ledger.sandbox import Sandbox

__all__ = ["Launch", "launch"]

_MODULE = "runners.rank"
"""The claim process's own entry point: ``python -m MODULE REQUEST RESULT``."""


def _backend(device: str) -> str:
    """NCCL where the ranks will run on CUDA, gloo otherwise (decided without touching
    CUDA here: the parent creates no context)."""
    if device == "cpu":
        return "gloo"
    if device == "cuda":
        return "nccl"
    used = nvml.devices_used()
    return "nccl" if used is not None and used[0] else "gloo"


def _requests(
    work: Path, request: ClaimRequest, backend: str | None, fork_server: ForkServer | None
) -> list[list[str]]:
    """Write one request per rank; the command line that runs each. `backend` None:
    the ranks are not joined in a process group."""
    argvs = []
    body = request.body()
    world_size = request.run.world_size
    for rank in range(world_size):
        req, out = work / f"request{rank}.json", work / f"result{rank}.json"
        mine = dict(body)
        if backend is not None:
            mine["rank_session"] = {
                "rank": rank,
                "world_size": world_size,
                "backend": backend,
                "init_file": str(work / "rendezvous"),
                "timeout_s": max(1, int(request.run.timeout_s)),
            }
        child.write_request(req, mine)
        forked = fork_server if world_size == 1 else None
        argvs.append(
            forked.argv(_MODULE, req, out) if forked is not None else child.argv(_MODULE, req, out)
        )
    return argvs


def _launches(
    argvs: list[list[str]],
    request: ClaimRequest,
    *,
    sandbox: Sandbox | None,
    work: Path,
    holder: int | None = None,
) -> tuple[list[list[str]], list[dict[str, str]]]:
    """Each rank's command line and environment, inside the sandbox where there is one.

    Every rank of a claim reads the code it is given and writes only its claim folder
    (request, result, scratch, a /dev/shm the ranks share) and the artifact folder."""
    extra = dict(request.env)
    envs = [{**child.env(), **extra} for _ in argvs]
    if sandbox is None:
        return argvs, envs
    # Several ranks share one user, pid, ipc and network namespace (``holder``'s:
    # `ledger.sandbox.namespaces`), so they rendezvous over loopback and NCCL reaches
    # its peers, and still reach nothing else.
    shared = holder is not None
    scratch = work / "scratch"
    shm = work / "shm"
    scratch.mkdir()
    shm.mkdir()
    writable: list[str | Path] = [work]
    if request.artifact_dir is not None:
        writable.append(request.artifact_dir)
    policy = sandbox.policy(
        writable=writable,
        read_only=request.code(),
        network=request.run.network,
        shm=shm if len(argvs) > 1 else None,
        scratch=scratch,
    ).with_(joined=shared, holder=holder)
    if extra.get(DEVICE_SHARED_VAR) == "1":
        # Not a secret, and the sandbox passes no LEDGER_* variable of its own accord.
        policy = policy.with_(env=(*policy.env, (DEVICE_SHARED_VAR, "1")))
    out = [sandbox.launch(policy, a, e) for a, e in zip(argvs, envs, strict=True)]
    return [a for a, _ in out], [e for _, e in out]


@dataclass
class Launch:
    """One attempt at a claim, ready to start: its folder, each rank's command line and
    environment, and what is given back once it ended (`close`)."""

    work: Path
    argvs: list[list[str]]
    backend: str
    forked: bool
    cgroup: ClaimCgroup | None
    """Every process of the claim in a cgroup of its own (None where the host has none)."""
    envs: list[dict[str, str]] = field(default_factory=list)
    refusal: Path | None = None
    """Forked: where the client writes why the server refused the fork."""
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    @property
    def result_paths(self) -> list[Path]:
        return [self.work / f"result{rank}.json" for rank in range(len(self.argvs))]

    def refused(self, group: RankGroup) -> str | None:
        """Why the fork server refused this claim's fork, or None. The client was refused
        before the server forked: the claim's code never ran. A claim that exits
        `REFUSED` (or writes ``RESULT.refused``) itself has no note here: its exit is its
        outcome."""
        if self.refusal is None:
            return None
        if group.procs[0].returncode == REFUSED and self.refusal.is_file():
            return read_note(self.refusal) or "no reason given"
        return None

    def close(self) -> None:
        self.stack.close()
        if self.cgroup is not None:
            self.cgroup.close()
        shutil.rmtree(self.work, ignore_errors=True)
        if self.refusal is not None:
            shutil.rmtree(self.refusal.parent, ignore_errors=True)


def launch(
    request: ClaimRequest, fork_server: ForkServer | None, sandbox: Sandbox | None
) -> Launch | CheckResult:
    """The claim's folder, each rank's request, command line and environment (forked,
    or inside the sandbox); an infra-error where it cannot start (none of its code ran)."""
    work = Path(tempfile.mkdtemp(prefix="ledger-claim-", dir=request.work_root))
    full = _disk_full(work, request.work_root)
    if full is not None:
        # Observed here before the claim started; whose it is, by what the run's
        # sandboxes wrote of their cap (`ledger.sandbox.quota`).
        shutil.rmtree(work, ignore_errors=True)
        r = request.not_started(full.reason)
        if full.whose == "code":
            r.outcome = "failed"
        return r
    backend = _backend(request.run.device)
    argvs = _requests(work, request, backend if request.grouped else None, fork_server)
    forked = fork_server is not None and request.run.world_size == 1
    # Every process of the claim in a cgroup of its own: the kernel's peak over all of
    # them, however briefly each lived (none here: the view is sampled, and says so).
    attempt = Launch(work, argvs, backend, forked, ClaimCgroup.make())
    try:
        if sandbox is not None and sandbox.mode != "none":
            # The claim's folder is Ledger's, written by the sandbox's unprivileged uid,
            # and so is the folder it lies in (made for this claim by the caller, e.g. a
            # Ray task's, after the fork server's sandbox was handed the folder above it).
            if request.work_root is not None:
                sandbox.hand_over(request.work_root, recursive=False)
            sandbox.hand_over(work)
        if forked:
            _forked(attempt, request)
        else:
            holder = None
            if sandbox is not None and sandbox.bwrap and len(argvs) > 1:
                from ledger.sandbox.namespaces import shared_namespaces

                holder = attempt.stack.enter_context(
                    shared_namespaces(sandbox.bwrap, sandbox.base, network=request.run.network)
                )
            attempt.argvs, attempt.envs = _launches(
                argvs, request, sandbox=sandbox, work=work, holder=holder
            )
    except SandboxBreach as e:
        # Its self-test reached something: none of the pull request's code ran.
        attempt.close()
        # The host's own evidence (its self-test, read by this process), not a claim's
        # word: an infrastructure error.
        return request.not_started(str(e)[:2000])
    except BaseException:
        attempt.close()
        raise
    return attempt


def _forked(attempt: Launch, request: ClaimRequest) -> None:
    """The environment of a claim forked from the fork server."""
    # The client places the forked worker in the cgroup before it starts.
    placed = {} if attempt.cgroup is None else {CGROUP_VAR: str(attempt.cgroup.path)}
    # Outside the sandbox: a refused fork is reported, never run in the client. It writes
    # why where no sandboxed process can (a private folder of this process's), so that a
    # claim that exits `REFUSED` itself is not taken for a refusal.
    attempt.refusal = Path(tempfile.mkdtemp(prefix="ledger-refusal-")) / "refused"
    placed[REFUSAL_VAR] = str(attempt.refusal)
    extra = dict(request.env)
    attempt.envs = [{**child.env(), **extra, **placed, STRICT_VAR: "1"} for _ in attempt.argvs]


_MIN_FREE_BYTES = quota.MIN_FREE
"""Less free disk than this where the claim's folder lies, before it starts: short of
disk (the host's or the pull request's: `ledger.sandbox.quota.shortage`)."""


def _disk_full(work: Path, run_folder: Path | None) -> quota.Shortage | None:
    """Too little disk where the claim's folder lies, and whose: the host's only where it
    had less free than the sandboxes' cap still allowed them, measured beside what they
    wrote in the run's folder (``run_folder``, the one they may write), which the pull
    request's code can fill and so must not decide an infra-error on its own."""
    try:
        free = shutil.disk_usage(work).free
    except OSError:
        return None
    if free >= _MIN_FREE_BYTES:
        return None
    limit = quota.cap()
    wrote = quota.written(run_folder, stop=limit) if run_folder is not None else 0
    return quota.shortage(free, wrote, limit, work.parent)
