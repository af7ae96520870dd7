"""A local run's scheduler: each claim started as soon as devices of its own are free
(or, for a claim that may share one, a device with room), claims side by side said as
they run, and each handed to the recording as it finishes; a shared run that did not
pass runs again alone before anything of it is recorded (`ledger.execution.sharing`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ledger.execution import sharing
from ledger.execution.claimrun import ClaimRun, Finished
from ledger.execution.devices import Device as GpuDevice
from ledger.execution.devices import DevicePool
from ledger.execution.local import LocalExecutor

__all__ = ["Recording", "claim_tag", "not_here", "schedule"]


class Recording(Protocol):
    """Where a finished claim goes (`local_run`'s recording: signed and recorded)."""

    def poll(self) -> None:
        """Raises when the run may no longer be recorded (the doctor's refusal), so the
        running claims stop at once."""

    def judged(self) -> bool:
        """Whether a finished claim may be recorded now without waiting for the
        doctor's judgement."""

    def finished(
        self,
        fut: Any,
        run: ClaimRun,
        t0: float,
        n: int,
        say: Callable[[str], None],
        wait_ns: int | None = None,
        extra: dict[str, str] | None = None,
        ended: float | None = None,
    ) -> None: ...


def claim_tag(run: ClaimRun, n: int) -> str:
    return f"[{run.index}/{n}]"


@dataclass
class _Running:
    run: ClaimRun
    devices: list[GpuDevice]
    t0: float
    shared: bool
    beside: set[int]
    """The indices of the claims that ran on one of its devices while it did."""


def schedule(
    ex: LocalExecutor,
    pool: DevicePool,
    explicit: bool,
    runs: Sequence[ClaimRun],
    recording: Recording,
    say: Callable[[str], None],
    visible: int = 0,
) -> list[tuple[str, str]]:
    """Start each claim as soon as devices of its own are free (plan order, a later
    claim may pass one that waits for more devices), or, for a claim that may share
    one (`ledger.execution.sharing`), a device with room; record each as it finishes.
    A shared run that did not pass runs again alone before anything is recorded. A claim
    that finished before the doctor judged gives its devices back at once and waits for
    the judgement to be recorded: the claims after it do not.
    ``visible``: the GPUs a claim sees without --gpus. The claims this host cannot run
    as asked, with why (`not_here`): none of them started, nothing of them is recorded."""
    import concurrent.futures as cf

    n = len(runs)
    by_index = {r.index: r for r in runs}
    rerun_why: dict[int, str] = {}
    """The claims that run alone because a shared run of each did not pass (by index), and
    why, for their receipts."""
    pending, skipped = _runnable(runs, explicit, pool, say, visible)
    running: dict[cf.Future[Finished], _Running] = {}
    waited: dict[int, int] = {}
    """Nanoseconds each claim waited for devices of its own (by index), with --gpus."""
    queued = time.monotonic_ns()
    held: list[_Held] = []
    """Finished claims waiting for the doctor's judgement to be recorded."""

    try:
        while pending or running or held:
            for run in list(pending):
                shared = (
                    pool.share > 1
                    and run.index not in rerun_why
                    and run.device != "cpu"
                    and sharing.shares(run.check, run.params)
                )
                got = pool.take(run.gpus if explicit else 1, shared=shared)
                if got is None:
                    continue
                pending.remove(run)
                if explicit:
                    waited[run.index] = time.monotonic_ns() - queued
                ranks = f", {run.world_size} ranks" if run.world_size > 1 else ""
                where = f" on {', '.join(d.label for d in got)}" if explicit else ""
                entry = _Running(run, got, time.monotonic(), shared, set())
                _mark_beside(entry, running.values())
                how = " (sharing the device)" if shared and entry.beside else ""
                say(f"{claim_tag(run, n)} {run.claim} ({run.check}{ranks}){where}{how} ...")
                running[ex.submit(run, got, explicit, shared)] = entry
                _say_running(running.values(), explicit or pool.share > 1, n, say)
            finished, _ = cf.wait(list(running), timeout=0.25, return_when=cf.FIRST_COMPLETED)
            recording.poll()
            for fut in finished:
                r = running.pop(fut)
                pool.give_back(r.devices)
                extra = _ended(fut, r, by_index, rerun_why, n, say)
                if extra is None:
                    pending.insert(0, r.run)
                else:
                    held.append((fut, r, extra, time.monotonic()))
            # Recorded once the doctor has judged (at once where it has): the devices
            # went back above, so the next claims start meanwhile rather than after the
            # probe. With nothing left to start or running, waiting for it is all there is.
            if held and (recording.judged() or not (running or pending)):
                _record(held, recording, n, say, waited)
            if finished:
                _say_running(running.values(), explicit or pool.share > 1, n, say)
    except BaseException:
        # Ctrl-C (or any failure here): every running claim's processes are stopped
        # before the worktrees go.
        ex.cancel.set()
        cf.wait(list(running))
        raise
    return skipped


def _ended(
    fut: Any,
    r: _Running,
    by_index: dict[int, ClaimRun],
    rerun_why: dict[int, str],
    n: int,
    say: Callable[[str], None],
) -> dict[str, str] | None:
    """A finished claim's facts for its receipts (whom it shared its device with, why it
    ran alone), or None when a shared run did not pass and it runs again alone."""
    names = sorted(by_index[i].claim for i in r.beside)
    why = _shared_failed(fut, r)
    if why is not None:
        # Nothing of this run is recorded: alone, the claim is judged again.
        who = f" ({', '.join(names)})" if names else ""
        say(f"{claim_tag(r.run, n)} {r.run.claim}: {why}{who}: running it again alone")
        rerun_why[r.run.index] = f"{why}{who}"
        return None
    extra = {"device_shared_with": ",".join(names)} if r.shared and names else {}
    if r.run.index in rerun_why:
        extra["device_alone_after"] = rerun_why[r.run.index]
    return extra


_Held = tuple[Any, _Running, dict[str, str], float]
"""A finished claim's future, its entry, its extra facts and when it ended."""


def _record(
    held: list[_Held],
    recording: Recording,
    n: int,
    say: Callable[[str], None],
    waited: dict[int, int],
) -> None:
    """Every held claim handed to the recording, in the order they finished."""
    for fut, r, extra, ended in held:
        recording.finished(fut, r.run, r.t0, n, say, waited.get(r.run.index), extra, ended)
    held.clear()


def not_here(run: ClaimRun, explicit: bool, handed: int, visible: int) -> str | None:
    """Why this host cannot run ``run`` as asked, decided from what it hands out before
    the claim starts, or None: more ranks than the devices --gpus gives (``handed``), or,
    without --gpus, a CUDA claim of more ranks than the GPUs it would see (``visible``).
    A claim that started would only find it out from inside, which no receipt may say
    as the code's failure (nor as the host's: the host is as it was asked to be)."""
    if explicit:
        if run.gpus > handed:
            return f"it needs {run.gpus} devices of its own and --gpus gives {handed}"
        return None
    cuda = run.device == "cuda" or (run.device == "auto" and visible > 0)
    if cuda and run.world_size > visible:
        return f"it needs {run.world_size} CUDA devices (world_size) and this host shows {visible}"
    return None


def _runnable(
    runs: Sequence[ClaimRun],
    explicit: bool,
    pool: DevicePool,
    say: Callable[[str], None],
    visible: int,
) -> tuple[list[ClaimRun], list[tuple[str, str]]]:
    """The claims that can run, in plan order, and those said not run here, with why."""
    n = len(runs)
    pending, skipped = [], []
    for run in runs:
        why = not_here(run, explicit, pool.size, visible)
        if why is None:
            pending.append(run)
            continue
        say(f"{claim_tag(run, n)} {run.claim}: not run: {why}")
        skipped.append((run.claim, f"not run here: {why}"))
    return pending, skipped


def _mark_beside(entry: _Running, running: Iterable[_Running]) -> None:
    """The claim just started and each running one on a device of its: beside each other."""
    mine = {d.index for d in entry.devices}
    for other in running:
        if mine & {d.index for d in other.devices}:
            other.beside.add(entry.run.index)
            entry.beside.add(other.run.index)


def _say_running(
    running: Iterable[_Running], show: bool, n: int, say: Callable[[str], None]
) -> None:
    """With claims side by side (``show``), which run now, where, and for how long."""
    now_running = sorted(running, key=lambda x: x.run.index)
    if show and len(now_running) > 1:
        now = time.monotonic()
        cells = [
            f"{claim_tag(r.run, n)} {r.run.claim} ({', '.join(d.label for d in r.devices)}, "
            f"{now - r.t0:.0f} s)"
            for r in now_running
        ]
        say("running: " + " | ".join(cells))


def _shared_failed(fut: Any, r: _Running) -> str | None:
    """Why a run that may have shared its device is run again alone, or None (it did
    not share, it passed with a complete proof, or its runner failed: that is recorded
    as it is)."""
    if not r.shared or fut.exception() is not None:
        return None
    fin: Finished = fut.result()
    return sharing.rerun_why(fin.results or [])
