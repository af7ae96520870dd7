"""The parent's outside view of a claim process's memory, which bounds what it reports.

A claim process reports its own peak (``process_peak_bytes``, `selfview`); the
parent, which runs no pull-request code, samples the same process from outside
while it runs: on CUDA the GPU memory NVML attributes to its pid, on CPU its
resident set (``VmRSS`` in /proc). A report far below what was seen (beyond
the slack of the allocator and of sampling) makes the result inconclusive, with
both figures: the process lied about itself, or its harness is broken.

The claim process is the one that writes the result: the fork server's worker
(its pid is in ``RESULT.pid``), else the first process below the launcher that
is not the sandbox (bubblewrap forks the command as its child).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runners.contract.result import CheckResult
from runners.harness import nvml
from runners.harness.cgroup import ClaimCgroup
from runners.harness.hostpid import write_note
from runners.harness.processes import descendants, proc_table

__all__ = ["CPU_SLACK_BYTES", "CUDA_SLACK_BYTES", "OutsideView", "bound", "read_note"]

CUDA_SLACK_BYTES = 512 * 1024**2
"""What NVML may see beyond pool peak plus outside-pool bytes as the process reports
them: the allocator's 2 MiB block rounding, kernels and workspaces loaded lazily
after the process last looked at itself."""
CPU_SLACK_BYTES = 64 * 1024**2
"""The kernel keeps the resident high-water mark the process reports, so a sample
from outside can exceed it only by what was mapped after the process read it."""
SAMPLE_S = 0.02
REPORTED = "process_peak_bytes"


def _rss(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


_RSS = "resident set (VmRSS) of the claim process"


def _device_used() -> int | None:
    got = nvml.devices_used()
    return None if got is None else sum(got[0].values())


def read_note(path: Path, limit: int = 1 << 16) -> str | None:
    """A small note a client left in the claim's folder (the worker's pid, what the
    server ended), read beneath the folder as data: a link, FIFO or device that the
    claim's code put in its place is never followed or opened (None)."""
    from ledger.outputs.beneath import Folder, Refused

    try:
        with Folder(path.parent) as folder:
            return folder.read(path.name, limit).decode()
    except (OSError, Refused, UnicodeDecodeError):
        return None


LAUNCHER_NAME = "ledger-launch"
"""The name the sandbox's launcher gives itself where it stays (`ledger.sandbox.launcher`)."""


def claim_pid(launched: int, marker: Path) -> int | None:
    """The claim process of a rank started as ``launched``: the forked worker named
    in ``marker``, else the first process below the sandbox's launcher."""
    text = read_note(marker)
    if text is not None:
        try:
            return int(text)
        except ValueError:
            return None
    table = proc_table()
    if table is None or launched not in table:
        return None
    pid = launched
    # bubblewrap's own processes, and the sandbox's launcher where it waits for one
    # (`ledger.sandbox.launcher`, route rootmap), hold none of the claim's memory.
    while table[pid].comm in ("bwrap", LAUNCHER_NAME):
        kids = sorted(p for p, i in descendants(pid, table).items() if i.ppid == pid)
        if not kids:
            return None
        pid = kids[0]
    return pid


@dataclass
class OutsideView:
    """Samples each rank's claim process until `stop`; the highest figures seen."""

    launched: Sequence[int]
    markers: Sequence[Path]
    cgroup: ClaimCgroup | None = None
    """The claim's cgroup, where one could be made: every process of the claim."""
    notes: Sequence[Path] = ()
    shared: bool = False
    """The claim's device may hold other claims (`runners.contract.names.DEVICE_SHARED_VAR`): the
    device's used memory is not read as the claim's."""
    """Per rank, where to note the claim process's host pid once seen (a process
    started afresh in the sandbox cannot know it: `runners.harness.hostpid`)."""
    rss: list[int] = field(default_factory=list)
    gpu: list[int | None] = field(default_factory=list)
    claim_pids: list[int | None] = field(default_factory=list)
    """Each rank's claim process as last seen."""
    device_before: int | None = None
    """Device used memory (NVML, all GPUs) before the claim started."""
    device_peak: int | None = None
    cgroup_peak: int | None = None
    """The cgroup's peak over all of the claim's processes (host memory), once stopped."""
    cgroup_gpu: int = 0
    """The highest sum of NVML's per-process GPU memory over the cgroup's processes."""
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> OutsideView:
        self.rss = [0 for _ in self.launched]
        self.gpu = [None for _ in self.launched]
        self.claim_pids = [None for _ in self.launched]
        self.device_before = _device_used()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def sample(self) -> None:
        used = nvml.pids_used()
        for rank, (pid0, marker) in enumerate(zip(self.launched, self.markers, strict=True)):
            pid = claim_pid(pid0, marker)
            if pid is None:
                continue
            if self.claim_pids[rank] is None and rank < len(self.notes):
                write_note(str(self.notes[rank]), pid)
            self.claim_pids[rank] = pid
            rss = _rss(pid)
            if rss is not None:
                self.rss[rank] = max(self.rss[rank], rss)
            if used is not None and pid in used:
                self.gpu[rank] = max(self.gpu[rank] or 0, used[pid])
        if self.cgroup is not None and used is not None:
            together = sum(used.get(p, 0) for p in self.cgroup.procs())
            self.cgroup_gpu = max(self.cgroup_gpu, together)
        dev = _device_used()
        if dev is not None:
            self.device_peak = max(self.device_peak or 0, dev)
        self.samples += 1

    def cuda_seen(self, rank: int) -> tuple[int, str] | None:
        """The GPU figure for ``rank`` and what it is: NVML's per-process memory of the
        claim process, else (one rank, NVML not showing its pid, as in some
        containers) the device's used memory above its level before the claim."""
        if self.cgroup_gpu and len(self.launched) == 1:
            what = "NVML per-process GPU memory summed over the claim's cgroup"
            return max(self.cgroup_gpu, self.gpu[rank] or 0), what
        if self.gpu[rank]:
            return self.gpu[rank] or 0, "NVML per-process GPU memory of the claim process"
        if (
            not self.shared
            and len(self.launched) == 1
            and self.device_before is not None
            and self.device_peak
        ):
            seen = self.device_peak - self.device_before
            return seen, "NVML device used memory above its level before the claim"
        return None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(SAMPLE_S)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.cgroup is not None:
            self.cgroup_peak = self.cgroup.peak_bytes()

    def host_seen(self, rank: int) -> tuple[int, str]:
        """The host-memory figure for ``rank``: the cgroup's peak over every process of
        the claim (one rank: the cgroup holds that rank's processes alone), else the
        sampled resident set of the claim process."""
        # No cgroup here, or it saw less (pages shared with the fork server are in the
        # process's resident set but charged to the server): the sampled figure, said so.
        why = "no claim cgroup" if self.cgroup is None else f"above the cgroup's {self.cgroup_peak}"
        sampled = (self.rss[rank], f"sampled {_RSS} ({self.samples} samples, {why})")
        cg, peak = self.cgroup, self.cgroup_peak
        if (
            cg is not None
            and peak is not None
            and len(self.launched) == 1
            and peak >= self.rss[rank]
        ):
            return peak, cg.basis
        return sampled


def bound(
    results: list[CheckResult], view: OutsideView, rank: int, *, say: Callable[[str], None]
) -> None:
    """Record the outside figure beside each result's reported peak; a decisive
    outcome whose report is below it beyond the slack becomes inconclusive."""
    for r in results:
        cuda = r.scope.get("device_kind") == "cuda"
        if cuda:
            gpu = view.cuda_seen(rank)
            got_seen = None if gpu is None else (gpu[0], f"{gpu[1]} ({view.samples} samples)")
        else:
            got_seen = view.host_seen(rank)
        if got_seen is None or got_seen[0] <= 0:
            continue  # nothing observable from outside (no NVML, no /proc)
        seen, what = got_seen
        slack = CUDA_SLACK_BYTES if cuda else CPU_SLACK_BYTES
        r.measurements["outside_peak_bytes"] = seen
        r.measurements["outside_peak_basis"] = what
        got = r.measurements.get(REPORTED)
        reported = got if isinstance(got, int) and not isinstance(got, bool) else 0
        if seen > reported + slack and r.outcome in ("passed", "failed"):
            r.outcome = "inconclusive"
            r.reason = (
                f"the claim process reported a peak of {reported} bytes, but the outside view "
                f"saw {seen} bytes ({what}), more than the {slack}-byte slack above it"
            )
            say(f"outside view: {r.reason}")
