"""Run one claim in a child process, from the parent's side: launch, wait, read.

A check can leave the CUDA context unusable (after an out-of-memory at the
edge of the device, a sticky "unknown error" fails every later kernel in
the process). Running each claim in its own process keeps one check's broken
context from turning the next checks into false failures, and gives every
claim the same cold start. The child is a resource this module owns: it is
reaped, its process group is ended on Ctrl-C, and its exit is recorded in the
cleanup proof of every result it produced.

    python -m runners.rank REQUEST.json RESULT.json   (the child side, `runners.rank`)
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.sandbox import quota
from ledger.sandbox.proof import SandboxBreach
from runners.claim.authors import stamp
from runners.claim.claim_exit import (
    GpuState,
    cleanup_verdict,
    died,
    exit_release,
    merged,
    stopped_after_peer,
    timed_out,
    with_exit_proof,
)
from runners.contract.names import DEVICE_SHARED_VAR
from runners.contract.request import ClaimRequest
from runners.contract.result import (
    CheckResult,
    Json,
    ReleasedResource,
    ResultError,
    Stamped,
    check_result,
    infra_error,
    untrusted,
)
from runners.contract.result import result_from_dict as _result_from
from runners.fork.forkclient import CGROUP_VAR, REFUSAL_VAR, REFUSED, STRICT_VAR
from runners.fork.forkparent import ForkServer
from runners.fork.preload import note_learned
from runners.harness import child, nvml, timeline
from runners.harness.cgroup import ClaimCgroup
from runners.harness.launch import RankExit, RankGroup
from runners.harness.outside import OutsideView, bound, read_note

if TYPE_CHECKING:
    from ledger.sandbox import Sandbox

__all__ = ["AFRESH", "ClaimRequest", "run_claim_isolated"]

_BAD = ("failed", "infra-error")
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


def run_claim_isolated(
    request: ClaimRequest,
    *,
    progress: Callable[[str], None],
    fork_server: ForkServer | None = None,
    sandbox: Sandbox | None = None,
    cancel: threading.Event | None = None,
) -> list[Stamped]:
    """`runners.api.run_claim` in fresh child processes, one per rank; its results, with
    the host's facts stamped on them once, here (`ClaimRequest.stamp`: the host's
    observation, the ``sandbox`` facet, the claim's network and profile).

    All ranks form one process group: on the request's ``timeout_s`` it is killed and
    the one result is a failure "timed out after N s". A rank that dies without results
    (a crash, a signal) ends the claim: the others are stopped, and the result names
    the rank and how it ended. With ``world_size`` > 1 the ranks' results are merged
    per check (`runners.claim.ranks.merge_ranks`). With a ``fork_server`` a single-rank
    claim's process is forked from it (imports already paid) instead of started as a
    new interpreter: still a new process, in the claim's process group, inside the
    server's sandbox. Otherwise each rank starts inside ``sandbox`` (None:
    unsandboxed). ``cancel`` set stops the claim (`runners.harness.launch.Cancelled`
    after its processes are ended).

    Three steps, each once: launch (`_launch`: the folder, the requests, the sandbox),
    wait (`_wait`: the ranks run and are stopped) and read (`_read`: each rank's result
    file read once, into results with their exit proof); then the stamp.
    """
    facet = sandbox.facet if sandbox is not None else "none"
    ran = _run(request, progress, fork_server, sandbox, cancel)
    if isinstance(ran, CheckResult):
        # The host's own result: the claim never started.
        return stamp(request, [ran], facet, claims_word=False)
    results, window = ran
    return stamp(request, results, facet, window)


def _run(
    request: ClaimRequest,
    progress: Callable[[str], None],
    fork_server: ForkServer | None,
    sandbox: Sandbox | None,
    cancel: threading.Event | None,
) -> CheckResult | tuple[list[CheckResult], tuple[int, int]]:
    """The claim's results as read, and when it was launched and seen to exit; or the
    host's own infra-error where it never started."""
    if fork_server is not None and fork_server.ready.fork_refused:
        # It said at ready that it will not fork (`runners.fork.forksafety`): its client runs
        # outside the sandbox and never runs a claim itself, so start afresh inside it.
        fork_server = None
    while True:
        launched = _launch(request, fork_server, sandbox)
        if isinstance(launched, CheckResult):
            return launched
        try:
            ran = _wait(request, launched, progress, cancel)
            late = launched.refused(ran.group)
            if late is None:
                return _read(request, launched, ran, progress, fork_server)
        finally:
            launched.close()
        # The claim's code never ran in this attempt: it starts afresh in a sandbox of
        # its own, as after a refusal at ready.
        progress(f"the fork server refused the claim ({untrusted(late)}): {AFRESH}")
        fork_server = None


AFRESH = "started afresh"
"""How a claim the fork server refused ends its progress line: it runs in a sandbox of
its own from then on."""


class _Results:
    """Each rank's result document, read once, from the first time it is asked for
    (the rank has exited: the file is complete)."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self.paths = list(paths)
        self._read: dict[int, Any] = {}

    def of(self, rank: int) -> Any | None:
        if rank not in self._read:
            self._read[rank] = child.read_result(self.paths[rank])
        return self._read[rank]


@dataclass
class _Launch:
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


def _launch(
    request: ClaimRequest, fork_server: ForkServer | None, sandbox: Sandbox | None
) -> _Launch | CheckResult:
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
    launch = _Launch(work, argvs, backend, forked, ClaimCgroup.make())
    try:
        if sandbox is not None and sandbox.mode != "none":
            # The claim's folder is Ledger's, written by the sandbox's unprivileged uid,
            # and so is the folder it lies in (made for this claim by the caller, e.g. a
            # Ray task's, after the fork server's sandbox was handed the folder above it).
            if request.work_root is not None:
                sandbox.hand_over(request.work_root, recursive=False)
            sandbox.hand_over(work)
        if forked:
            _forked(launch, request)
        else:
            holder = None
            if sandbox is not None and sandbox.bwrap and len(argvs) > 1:
                from ledger.sandbox.namespaces import shared_namespaces

                holder = launch.stack.enter_context(
                    shared_namespaces(sandbox.bwrap, sandbox.base, network=request.run.network)
                )
            launch.argvs, launch.envs = _launches(
                argvs, request, sandbox=sandbox, work=work, holder=holder
            )
    except SandboxBreach as e:
        # Its self-test reached something: none of the pull request's code ran.
        launch.close()
        # The host's own evidence (its self-test, read by this process), not a claim's
        # word: an infrastructure error.
        return request.not_started(str(e)[:2000])
    except BaseException:
        launch.close()
        raise
    return launch


def _forked(launch: _Launch, request: ClaimRequest) -> None:
    """The environment of a claim forked from the fork server."""
    # The client places the forked worker in the cgroup before it starts.
    placed = {} if launch.cgroup is None else {CGROUP_VAR: str(launch.cgroup.path)}
    # Outside the sandbox: a refused fork is reported, never run in the client. It writes
    # why where no sandboxed process can (a private folder of this process's), so that a
    # claim that exits `REFUSED` itself is not taken for a refusal.
    launch.refusal = Path(tempfile.mkdtemp(prefix="ledger-refusal-")) / "refused"
    placed[REFUSAL_VAR] = str(launch.refusal)
    extra = dict(request.env)
    launch.envs = [{**child.env(), **extra, **placed, STRICT_VAR: "1"} for _ in launch.argvs]


@dataclass
class _Ran:
    """A claim's ranks once they ended and were stopped, as the parent saw them."""

    group: RankGroup
    view: OutsideView
    stopped: list[ReleasedResource]
    """The proofs of the group's end (`RankGroup.stop`)."""
    results: _Results
    started: int
    exited: int
    gpu_before: GpuState | None


def _wait(
    request: ClaimRequest,
    launch: _Launch,
    progress: Callable[[str], None],
    cancel: threading.Event | None,
) -> _Ran:
    """Start the ranks, watch them from outside and wait: until each exited, one ended
    without its result (its peers then get a grace period), the time limit, or
    ``cancel``; then stop every rank (also on Ctrl-C: no rank outlives the claim)."""
    started = time.time_ns()
    gpu_before = nvml.devices_used()
    paths = launch.result_paths
    results = _Results(paths)
    group = RankGroup.start(
        launch.argvs,
        progress=progress,
        envs=launch.envs,
        preexec=_preexec(launch.cgroup, launch.forked),
    )
    markers = [p.with_name(p.name + ".pid") for p in paths]
    # From outside, while the claim runs: what its processes really hold.
    notes = [p.with_name(p.name + ".host") for p in paths]
    view = OutsideView(
        [p.pid for p in group.procs],
        markers,
        cgroup=launch.cgroup,
        notes=notes,
        shared=request.shared,
    ).start()

    def ended(rank: int, rc: int) -> bool:
        """A rank that died, or (among several) came back with a failure its peers may
        now wait on forever."""
        if rc != 0:
            return True
        got = results.of(rank)
        if not isinstance(got, list):
            return True
        return request.run.world_size > 1 and any(
            not isinstance(d, dict) or d.get("outcome") in _BAD for d in got
        )

    try:
        group.wait(timeout_s=request.run.timeout_s, died=ended, cancel=cancel)
    finally:
        exited = time.time_ns()
        view.stop()
        stopped = group.stop()
    return _Ran(group, view, stopped, results, started, exited, gpu_before)


def _read(
    request: ClaimRequest,
    launch: _Launch,
    ran: _Ran,
    progress: Callable[[str], None],
    fork_server: ForkServer | None,
) -> tuple[list[CheckResult], tuple[int, int]]:
    """How each rank ended, into the claim's results: its own (bounded by what the
    parent saw), or a failure that says how it died or timed out; each with the exit
    proof. And the window the host saw the claim run in, for the stamp."""
    group, view, stopped = ran.group, ran.view, list(ran.stopped)
    paths = launch.result_paths
    if launch.forked:
        stopped.append(_ended_by_server(fork_server, paths[0], launch.cgroup))
    if launch.cgroup is not None:
        stopped.insert(0, _cgroup_empty(launch.cgroup))
    exits = group.exits()
    # The process that held the GPU memory is not the launcher: a forked worker (its pid
    # written by the client) or the command below the sandbox.
    pids = _claim_pids([e.pid for e in exits], paths, view)
    shown = any(g for g in view.gpu) or view.cgroup_gpu > 0
    at_exit = exit_release(
        ran.gpu_before, pids, request.gpu_uuids, shared=request.shared, shown=shown
    )
    got = [ran.results.of(rank) if e.rc == 0 else None for rank, e in enumerate(exits)]
    results = _ended(request, launch, ran, exits, got, at_exit, progress)
    stamps = {"launched": ran.started, "exited": ran.exited, "proved": time.time_ns()}
    for r in results:
        r.cleanup = with_exit_proof(r.cleanup, stopped, at_exit)
        cleanup_verdict(r)
        r.measurements[timeline.MEASUREMENT] = dict[str, Json](
            timeline.placed(
                r.measurements.get(timeline.MEASUREMENT), stamps, (r.started_ns, r.finished_ns)
            )
        )
    # Seen to end now: the host's facts are stamped by the caller, once, each fact by
    # its author (`runners.claim.authors`).
    window = (ran.started, time.time_ns())
    for path in paths:
        note_learned(path.with_name(path.name + ".modules"), request.repo_root)
    return results, window


def _claim_pids(pids: list[int], paths: Sequence[Path], view: OutsideView) -> list[int]:
    """The process of each rank that held the GPU memory, not its launcher: a forked
    worker (its pid written by the client) or the command below the sandbox."""
    for rank, path in enumerate(paths):
        noted = (read_note(path.with_name(path.name + ".pid")) or "").strip()
        if noted.isdigit():
            pids[rank] = int(noted)
        else:
            pids[rank] = view.claim_pids[rank] or pids[rank]
    return pids


def _ended(
    request: ClaimRequest,
    launch: _Launch,
    ran: _Ran,
    exits: Sequence[RankExit],
    got: list[Any],
    at_exit: tuple[bool, str] | None,
    progress: Callable[[str], None],
) -> list[CheckResult]:
    """The claim's results as its ranks ended: a malformed report failed, a timeout,
    every rank's own results merged, or how the first rank to fail died (its peers
    stopped after it)."""
    group, view = ran.group, ran.view
    claim, check, device, params = (
        request.run.claim,
        request.run.check,
        request.run.device,
        request.run.params,
    )
    common: dict[str, Any] = {
        "claim": claim,
        "check": check,
        "device": device,
        "started": ran.started,
    }
    cuda = launch.backend == "nccl"
    grouped = request.grouped
    malformed = _malformed(got, request.artifact_dir, claim)
    if malformed is not None:
        # The claim's report is its own: a malformed one fails the claim, its problem
        # quoted as the code's text.
        wrong = infra_error(
            claim=claim,
            check=check,
            version="unknown",
            params=dict(params),
            scope={"device_kind": device},
            reason="the claim process returned a malformed result (its own text, "
            f"quoted): {untrusted(malformed, 1500)}",
            started_ns=ran.started,
            finished_ns=time.time_ns(),
        )
        wrong.outcome = "failed"
        results = [wrong]
    elif group.timed_out:
        running = [e.rank for e in exits if e.rc is None or e.rc < 0]
        results = [
            timed_out(**common, params=params, timeout_s=request.run.timeout_s, ranks=running)
        ]
    elif all(g is not None for g in got):
        per_rank = [_bounded(g, view, i, progress) for i, g in enumerate(got) if g is not None]
        results = merged(
            per_rank, cuda=cuda, grouped=grouped, at_exit=at_exit, lead=group.first_death
        )
    else:
        bad = group.first_death
        bad = bad if bad is not None else next(i for i, g in enumerate(got) if g is None)
        first = got[bad]
        if first is None:
            gone = exits[bad]
            who = f"rank {bad} of {request.run.world_size} " if request.run.world_size > 1 else ""
            how = f"{who}claim runner process {gone.how()}"
            results = [died(**common, params=params, pid=gone.pid, how=how, tail=gone.tail)]
        else:
            # A rank came back with a failure; peers still waiting on it were stopped.
            per_rank = [
                _bounded(g, view, i, progress)
                if g is not None
                else [stopped_after_peer(_result_from(d), exits[i], bad) for d in first]
                for i, g in enumerate(got)
            ]
            results = merged(per_rank, cuda=cuda, grouped=grouped, at_exit=at_exit, lead=bad)
    return results


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


def _preexec(cgroup: ClaimCgroup | None, forked: bool) -> Callable[[], None] | None:
    """What each spawned rank does before its command: join the claim's cgroup (a
    forked worker is placed there by its client instead). It runs as root before the
    sandbox's launcher drops the uid (a join after the drop would fail), and a failed
    join fails the start: the claim's outside view would miss the rank."""
    if cgroup is None or forked:
        return None

    def run() -> None:
        cgroup.join()

    return run


def _ended_by_server(
    server: ForkServer | None, result: Path, cgroup: ClaimCgroup | None
) -> ReleasedResource:
    """What the claim process left running when it exited: the fork server (their
    subreaper) ended each before it reported the claim done, and named them to the
    client (``RESULT.ended``). A claim that leaves anything is not cleaned up."""
    named = result.with_name(result.name + ".ended")
    try:
        left = [str(x) for x in json.loads(read_note(named) or "[]")][:50]
    except (OSError, ValueError, TypeError):
        left = []
    where = "" if cgroup is None else f" (cgroup {cgroup.path.name})"
    if left:
        proof = (
            f"still running below the fork server after the claim process exited{where}: "
            f"{', '.join(left)}; sent SIGKILL"
        )
    else:
        proof = f"nothing left below the fork server by the claim process{where}"
    return ReleasedResource(
        kind="process",
        id=f"below-fork-server:{server.proc.pid if server is not None else 0}",
        released=not left,
        proof=proof,
    )


def _cgroup_empty(cgroup: ClaimCgroup) -> ReleasedResource:
    """The kernel's own list of the claim's processes, once it ended: empty, or each
    named and killed."""
    left = cgroup.close()
    if left:
        proof = f"still in the claim's cgroup: {', '.join(f'pid {p}' for p in left)}; sent SIGKILL"
    else:
        proof = f"no process left in the claim's cgroup ({cgroup.path.name})"
    return ReleasedResource(kind="cgroup", id=cgroup.path.name, released=not left, proof=proof)


def _bounded(
    docs: list[Any], view: OutsideView, rank: int, say: Callable[[str], None]
) -> list[CheckResult]:
    """A rank's results, each bounded by what the parent saw of the rank's process."""
    results = [_result_from(d) for d in docs]
    bound(results, view, rank, say=say)
    return results


def _malformed(got: list[Any], artifact_dir: Path | None, claim: str) -> str | None:
    """The first reason a rank's result document is not exactly a list of results for
    ``claim`` (a claim never speaks for another), or None. The parent reads only
    artifacts inside the artifact folder."""
    for rank, g in enumerate(got):
        if g is None:
            continue
        where = f"rank {rank}: " if len(got) > 1 else ""
        if not isinstance(g, list) or not g:
            return f"{where}must be a non-empty list of results"
        for d in g:
            try:
                check_result(d, artifact_dir=artifact_dir)
            except ResultError as e:
                return f"{where}{e}"
            if d["claim"] != claim:
                return f"{where}result.claim: names another claim, {untrusted(d['claim'], 80)}"
    return None


if __name__ == "__main__":
    # The claim process's name before it had a room of its own (`runners.rank`): a
    # client that names it is served the same request, the same way.
    from runners.rank.serve import serve

    sys.exit(child.serve(serve))
