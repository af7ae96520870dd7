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

import contextlib
import dataclasses
import json
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.sandbox.proof import SandboxBreach
from runners.authors import Observed, authored, observe
from runners.claim_exit import (
    cleanup_verdict,
    died,
    exit_release,
    merged,
    stopped_after_peer,
    timed_out,
    with_exit_proof,
)
from runners.forkclient import CGROUP_VAR, REFUSAL_VAR, REFUSED, STRICT_VAR
from runners.forkparent import ForkServer
from runners.harness import child, nvml, timeline
from runners.harness.cgroup import ClaimCgroup
from runners.harness.launch import RankGroup
from runners.harness.outside import REPORTED, OutsideView, bound, read_note
from runners.names import DEVICE_SHARED_VAR
from runners.preload import note_learned
from runners.result import (
    CheckResult,
    Json,
    ReleasedResource,
    ResultError,
    check_result,
    infra_error,
    untrusted,
)
from runners.result import result_from_dict as _result_from

if TYPE_CHECKING:
    from ledger.sandbox import Sandbox

__all__ = ["run_claim_isolated"]

DEFAULT_TIMEOUT_S = 1800
"""A claim's time limit when its caller states none (the plan's default, docs/plan.md)."""
_BAD = ("failed", "infra-error")


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
    work: Path,
    body: dict[str, Any],
    world_size: int,
    backend: str | None,
    timeout_s: float,
    fork_server: ForkServer | None,
) -> list[list[str]]:
    """Write one request per rank; the command line that runs each. `backend` None:
    the ranks are not joined in a process group."""
    argvs = []
    for rank in range(world_size):
        req, out = work / f"request{rank}.json", work / f"result{rank}.json"
        mine = dict(body)
        if backend is not None:
            mine["rank_session"] = {
                "rank": rank,
                "world_size": world_size,
                "backend": backend,
                "init_file": str(work / "rendezvous"),
                "timeout_s": max(1, int(timeout_s)),
            }
        child.write_request(req, mine)
        forked = fork_server if world_size == 1 else None
        argvs.append(
            forked.argv("runners.isolated", req, out)
            if forked is not None
            else child.argv("runners.isolated", req, out)
        )
    return argvs


def _launches(
    argvs: list[list[str]],
    *,
    sandbox: Sandbox | None,
    network: bool,
    work: Path,
    kwargs: dict[str, Any],
    extra: Mapping[str, str] | None = None,
    holder: int | None = None,
) -> tuple[list[list[str]], list[dict[str, str]]]:
    """Each rank's command line and environment, inside the sandbox where there is one.

    Every rank of a claim reads the code it is given and writes only its claim folder
    (request, result, scratch, a /dev/shm the ranks share) and the artifact folder."""
    envs = [{**child.env(), **(extra or {})} for _ in argvs]
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
    code = [kwargs[k] for k in ("repo_root", "base_root") if kwargs.get(k) is not None]
    writable: list[str | Path] = [work]
    if kwargs.get("artifact_dir") is not None:
        writable.append(kwargs["artifact_dir"])
    policy = sandbox.policy(
        writable=writable,
        read_only=code,
        network=network,
        shm=shm if len(argvs) > 1 else None,
        scratch=scratch,
    ).with_(joined=shared, holder=holder)
    if (extra or {}).get(DEVICE_SHARED_VAR) == "1":
        # Not a secret, and the sandbox passes no LEDGER_* variable of its own accord.
        policy = policy.with_(env=(*policy.env, (DEVICE_SHARED_VAR, "1")))
    out = [sandbox.launch(policy, a, e) for a, e in zip(argvs, envs, strict=True)]
    return [a for a, _ in out], [e for _, e in out]


def run_claim_isolated(
    *,
    progress: Callable[[str], None],
    device: str,
    claim: str,
    check: str,
    world_size: int = 1,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    distributed: bool | None = None,
    fork_server: ForkServer | None = None,
    sandbox: Sandbox | None = None,
    network: bool = False,
    work_root: Path | None = None,
    env: Mapping[str, str] | None = None,
    gpu_uuids: Sequence[str] | None = None,
    cancel: threading.Event | None = None,
    shared: bool = False,
    **kwargs: Any,
) -> list[CheckResult]:
    """`runners.api.run_claim` in fresh child processes, one per rank; same results.

    All ranks form one process group: on ``timeout_s`` it is killed and the one
    result is an infra-error "timed out after N s". A rank that dies without results
    (a crash, a signal) ends the claim: the others are stopped, and the result is an
    infra-error naming the rank and how it ended. With ``world_size`` > 1 the ranks'
    results are merged per check (`runners.ranks.merge_ranks`). ``distributed`` (default:
    ``world_size > 1``) runs the ranks inside a process group even at one rank, which
    exercises the multi-rank path on a single device. With a ``fork_server`` a
    single-rank claim's process is forked from it (imports already paid) instead of
    started as a new interpreter: still a new process, in the claim's process group,
    inside the server's sandbox. Otherwise each rank starts inside ``sandbox`` (None:
    unsandboxed), with a network only when ``network``; ``work_root`` is where the
    claim's folder goes (one the fork server's sandbox can write).
    ``env`` is added to every rank's environment (``CUDA_VISIBLE_DEVICES``: the claim's
    GPUs, whose ``gpu_uuids`` alone the exit proof reads); ``cancel`` set stops the claim
    (`runners.harness.launch.Cancelled` after its processes are ended). ``shared``: other
    claims may run on its GPUs meanwhile (`runners.names.DEVICE_SHARED_VAR`), so the
    devices' used memory proves nothing of this claim's.
    """
    grouped = world_size > 1 if distributed is None else distributed
    if fork_server is not None and fork_server.ready.get("fork_refused"):
        # It said at ready that it will not fork (`runners.forksafety`): its client runs
        # outside the sandbox and never runs a claim itself, so start afresh inside it.
        fork_server = None
    work = Path(tempfile.mkdtemp(prefix="ledger-claim-", dir=work_root))
    full = _disk_full(work)
    if full is not None:
        # Observed here before the claim started: its code cannot have caused it.
        shutil.rmtree(work, ignore_errors=True)
        r = infra_error(
            claim=claim,
            check=check,
            version="unknown",
            params=dict(kwargs.get("params") or {}),
            scope={"device_kind": device},
            reason=full,
            started_ns=time.time_ns(),
            finished_ns=time.time_ns(),
        )
        authored([r], _observed(device, gpu_uuids, env, kwargs, world_size, distributed))
        return [r]
    backend = _backend(device)
    body: dict[str, Any] = {"device": device, "claim": claim, "check": check, **kwargs}
    argvs = _requests(work, body, world_size, backend if grouped else None, timeout_s, fork_server)
    extra = dict(env or {})
    forked = fork_server is not None and world_size == 1
    # Every process of the claim in a cgroup of its own: the kernel's peak over all of
    # them, however briefly each lived (none here: the view is sampled, and says so).
    cgroup = ClaimCgroup.make()
    private: Path | None = None
    stack = contextlib.ExitStack()
    if sandbox is not None and sandbox.mode != "none":
        # The claim's folder is Ledger's, written by the sandbox's unprivileged uid, and
        # so is the folder it lies in (made for this claim by the caller, e.g. a Ray
        # task's, after the fork server's sandbox was handed the folder above it).
        if work_root is not None:
            sandbox.hand_over(work_root, recursive=False)
        sandbox.hand_over(work)
    if not forked:
        try:
            if sandbox is not None and sandbox.bwrap and len(argvs) > 1:
                from ledger.sandbox.namespaces import shared_namespaces

                holder = stack.enter_context(
                    shared_namespaces(sandbox.bwrap, sandbox.base, network=network)
                )
            else:
                holder = None
            argvs, envs = _launches(
                argvs,
                sandbox=sandbox,
                network=network,
                work=work,
                kwargs=kwargs,
                extra=extra,
                holder=holder,
            )
        except SandboxBreach as e:
            # Its self-test reached something: none of the pull request's code ran.
            stack.close()
            if cgroup is not None:
                cgroup.close()
            shutil.rmtree(work, ignore_errors=True)
            r = infra_error(
                claim=claim,
                check=check,
                version="unknown",
                params=dict(kwargs.get("params") or {}),
                scope={"device_kind": device},
                reason=str(e)[:2000],
                started_ns=time.time_ns(),
                finished_ns=time.time_ns(),
            )
            authored([r], _observed(device, gpu_uuids, env, kwargs, world_size, distributed))
            # The host's own evidence (its self-test, read by this process), not a
            # claim's word: it stays an infrastructure error.
            r.outcome, r.reason = "infra-error", str(e)[:2000]
            return [r]
    else:
        # The client places the forked worker in the cgroup before it starts.
        placed = {} if cgroup is None else {CGROUP_VAR: str(cgroup.path)}
        # Outside the sandbox: a refused fork is reported, never run in the client. It
        # writes why where no sandboxed process can (a private folder of this process's),
        # so that a claim that exits `REFUSED` itself is not taken for a refusal.
        private = Path(tempfile.mkdtemp(prefix="ledger-refusal-"))
        placed[REFUSAL_VAR] = str(private / "refused")
        envs = [{**child.env(), **extra, **placed, STRICT_VAR: "1"} for _ in argvs]
    started = time.time_ns()
    gpu_before = nvml.devices_used()
    results_of = [work / f"result{rank}.json" for rank in range(world_size)]
    try:
        group = RankGroup.start(
            argvs, progress=progress, envs=envs, preexec=_preexec(cgroup, forked)
        )
        markers = [p.with_name(p.name + ".pid") for p in results_of]
        # From outside, while the claim runs: what its processes really hold.
        notes = [p.with_name(p.name + ".host") for p in results_of]
        view = OutsideView(
            [p.pid for p in group.procs], markers, cgroup=cgroup, notes=notes, shared=shared
        ).start()
        seen: dict[int, Any] = {}

        def ended(rank: int, rc: int) -> bool:
            """A rank that died, or (among several) came back with a failure its peers
            may now wait on forever."""
            if rc != 0:
                return True
            if rank not in seen:
                seen[rank] = child.read_result(results_of[rank])
            got = seen[rank]
            if not isinstance(got, list):
                return True
            return world_size > 1 and any(
                not isinstance(d, dict) or d.get("outcome") in _BAD for d in got
            )

        try:
            group.wait(timeout_s=timeout_s, died=ended, cancel=cancel)
        finally:
            exited = time.time_ns()
            view.stop()
            # Also on Ctrl-C: no rank outlives the claim.
            stopped = group.stop()
        late = None
        if forked:
            refused = Path(placed[REFUSAL_VAR])
            if group.procs[0].returncode == REFUSED and refused.is_file():
                # The client was refused before the server forked: the claim's code never
                # ran in this attempt, so it starts afresh in a sandbox of its own, as
                # after a refusal at ready. A claim that exits `REFUSED` (or writes
                # ``RESULT.refused``) itself has no note here: its exit is its outcome.
                late = read_note(refused) or "no reason given"
        if late is not None:
            progress(f"the fork server refused the claim ({untrusted(late)}): started afresh")
            return run_claim_isolated(
                progress=progress,
                device=device,
                claim=claim,
                check=check,
                world_size=world_size,
                timeout_s=timeout_s,
                distributed=distributed,
                fork_server=None,
                sandbox=sandbox,
                network=network,
                work_root=work_root,
                env=env,
                gpu_uuids=gpu_uuids,
                cancel=cancel,
                shared=shared,
                **kwargs,
            )
        if forked:
            stopped.append(_ended_by_server(fork_server, results_of[0], cgroup))
        if cgroup is not None:
            stopped.insert(0, _cgroup_empty(cgroup))
        exits = group.exits()
        # The process that held the GPU memory is not the launcher: a forked worker
        # (its pid written by the client) or the command below the sandbox.
        pids = [e.pid for e in exits]
        for rank, marker in enumerate(markers):
            noted = (read_note(marker) or "").strip()
            if noted.isdigit():
                pids[rank] = int(noted)
            else:
                pids[rank] = view.claim_pids[rank] or pids[rank]
        shown = any(g for g in view.gpu) or view.cgroup_gpu > 0
        at_exit = exit_release(gpu_before, pids, gpu_uuids, shared=shared, shown=shown)
        got = [
            child.read_result(p) if e.rc == 0 else None
            for p, e in zip(results_of, exits, strict=True)
        ]
        common: dict[str, Any] = {
            "claim": claim,
            "check": check,
            "device": device,
            "started": started,
        }
        params = kwargs.get("params")
        art = kwargs.get("artifact_dir")
        malformed = _malformed(got, None if art is None else Path(art), claim)
        if malformed is not None:
            # The claim's report is its own: a malformed one fails the claim, its
            # problem quoted as the code's text.
            wrong = infra_error(
                claim=claim,
                check=check,
                version="unknown",
                params=dict(params or {}),
                scope={"device_kind": device},
                reason="the claim process returned a malformed result (its own text, "
                f"quoted): {untrusted(malformed, 1500)}",
                started_ns=started,
                finished_ns=time.time_ns(),
            )
            wrong.outcome = "failed"
            results = [wrong]
        elif group.timed_out:
            running = [e.rank for e in exits if e.rc is None or e.rc < 0]
            results = [timed_out(**common, params=params, timeout_s=timeout_s, ranks=running)]
        elif all(g is not None for g in got):
            per_rank = [_bounded(g, view, i, progress) for i, g in enumerate(got) if g is not None]
            results = merged(
                per_rank,
                cuda=backend == "nccl",
                grouped=grouped,
                at_exit=at_exit,
                lead=group.first_death,
            )
        else:
            bad = group.first_death
            bad = bad if bad is not None else next(i for i, g in enumerate(got) if g is None)
            first = got[bad]
            if first is None:
                gone = exits[bad]
                who = f"rank {bad} of {world_size} " if world_size > 1 else ""
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
                results = merged(
                    per_rank, cuda=backend == "nccl", grouped=grouped, at_exit=at_exit, lead=bad
                )
        stamps = {"launched": started, "exited": exited, "proved": time.time_ns()}
        for r in results:
            r.cleanup = with_exit_proof(r.cleanup, stopped, at_exit)
            cleanup_verdict(r)
            r.measurements[timeline.MEASUREMENT] = dict[str, Json](
                timeline.placed(
                    r.measurements.get(timeline.MEASUREMENT), stamps, (r.started_ns, r.finished_ns)
                )
            )
        # Each fact by its author: the host's own readings, the plan's facets; the
        # claim's own word on an infrastructure error is a failure (`runners.authors`).
        authored(
            results,
            _observed(device, gpu_uuids, env, kwargs, world_size, distributed),
            world_size=world_size if grouped else None,
            window=(started, time.time_ns()),
        )
        for path in results_of:
            note_learned(path.with_name(path.name + ".modules"), kwargs.get("repo_root"))
        return results
    finally:
        stack.close()
        if cgroup is not None:
            cgroup.close()
        shutil.rmtree(work, ignore_errors=True)
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)


_MIN_FREE_BYTES = 64 * 1024 * 1024
"""Less free disk than this where the claim's folder lies, before it starts: the host
is out of disk (an infrastructure error, observed before any of the claim's code ran)."""


def _disk_full(work: Path) -> str | None:
    try:
        free = shutil.disk_usage(work).free
    except OSError:
        return None
    if free >= _MIN_FREE_BYTES:
        return None
    return (
        f"the host is out of disk: {free} bytes free where the claim's folder lies "
        f"({work.parent}), observed before the claim started"
    )


def _observed(
    device: str,
    gpu_uuids: Sequence[str] | None,
    env: Mapping[str, str] | None,
    kwargs: Mapping[str, Any],
    world_size: int,
    distributed: bool | None,
) -> Observed:
    grouped = world_size > 1 if distributed is None else distributed
    trees = [Path(str(kwargs[k])) for k in ("repo_root", "base_root") if kwargs.get(k)]
    return observe(
        device,
        gpu_uuids,
        env=env or {},
        outside=trees,
        ranks=world_size if grouped and device != "cpu" else None,
    )


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


def _serve(req: dict[str, Json]) -> list[dict[str, Any]]:
    from runners.api import run_claim

    timeline.mark("serving")

    base = req.pop("base_root", None)
    art = req.pop("artifact_dir", None)
    ranked = req.pop("rank_session", None)
    sess = None
    if isinstance(ranked, dict):
        from runners.distributed import RankSession

        sess = RankSession.from_request(ranked)
        sess.start()
    from runners.harness import selfview
    from runners.harness.collect import freeze

    selfview.install()
    # What the process imported stays out of the claim's collections.
    freeze()
    results = run_claim(
        progress=child.say,
        repo_root=Path(str(req.pop("repo_root"))),
        base_root=None if base is None else Path(str(base)),
        artifact_dir=None if art is None else Path(str(art)),
        **req,  # type: ignore[arg-type]
    )
    if sess is not None:
        from runners.distributed import add_rank_proofs

        add_rank_proofs(results, sess, sess.finish())
    from runners.harness.hostpid import adopt_note

    # Started afresh in the sandbox, this process learns its host pid (the key of
    # NVML's per-process memory) from the parent's note, written once it saw it.
    adopt_note(sys.argv[2] + ".host")
    peak = selfview.peak_bytes()
    stamps = timeline.stamps()
    for r in results:
        r.measurements[REPORTED] = peak
        r.measurements[timeline.MEASUREMENT] = dict[str, Json](stamps)
    return [dataclasses.asdict(r) for r in results]


if __name__ == "__main__":
    sys.exit(child.serve(_serve))
