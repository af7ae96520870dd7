"""A claim's wait, from the parent's side: its ranks started in one process group,
watched from outside while they run, and stopped once each exited, one ended
without its result (its peers then get a grace period), the time limit passed or
the claim was cancelled; what the parent saw of them is `Ran`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runners.claim.claim_exit import GpuState
from runners.claim.claim_launch import Launch
from runners.contract.request import ClaimRequest
from runners.contract.result import ReleasedResource
from runners.harness import child, nvml
from runners.harness.cgroup import ClaimCgroup
from runners.harness.launch import RankGroup
from runners.harness.outside import OutsideView

__all__ = ["Ran", "Results", "wait"]

_BAD = ("failed", "infra-error")


class Results:
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
class Ran:
    """A claim's ranks once they ended and were stopped, as the parent saw them."""

    group: RankGroup
    view: OutsideView
    stopped: list[ReleasedResource]
    """The proofs of the group's end (`RankGroup.stop`)."""
    results: Results
    started: int
    exited: int
    gpu_before: GpuState | None


def wait(
    request: ClaimRequest,
    launch: Launch,
    progress: Callable[[str], None],
    cancel: threading.Event | None,
) -> Ran:
    """Start the ranks, watch them from outside and wait: until each exited, one ended
    without its result (its peers then get a grace period), the time limit, or
    ``cancel``; then stop every rank (also on Ctrl-C: no rank outlives the claim)."""
    started = time.time_ns()
    gpu_before = nvml.devices_used()
    paths = launch.result_paths
    results = Results(paths)
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
    return Ran(group, view, stopped, results, started, exited, gpu_before)


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
