"""A claim's reading, from the parent's side, once its ranks ended: how each ended, into
the claim's results (its own, bounded by what the parent saw; or a failure that says
how it died or timed out), each with the exit proof (the processes and GPU memory
left, the fork server's word on what the claim left below it, the claim's cgroup
emptied), and the window the host saw it run in, for the stamp.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from runners.claim.claim_exit import (
    cleanup_verdict,
    died,
    exit_release,
    merged,
    stopped_after_peer,
    timed_out,
    with_exit_proof,
)
from runners.claim.claim_launch import Launch
from runners.claim.claim_wait import Ran
from runners.contract.request import ClaimRequest
from runners.contract.result import (
    CheckResult,
    Json,
    ReleasedResource,
    ResultError,
    check_result,
    infra_error,
    untrusted,
)
from runners.contract.result import result_from_dict as _result_from
from runners.fork.forkparent import ForkServer
from runners.fork.preload import note_learned
from runners.harness import timeline
from runners.harness.cgroup import ClaimCgroup
from runners.harness.launch import RankExit
from runners.harness.outside import OutsideView, bound, read_note

__all__ = ["read"]


def read(
    request: ClaimRequest,
    launch: Launch,
    ran: Ran,
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
    launch: Launch,
    ran: Ran,
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
