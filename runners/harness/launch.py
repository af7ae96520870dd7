"""Start a claim's processes as one process group, wait with a deadline, end them all.

A claim runs as one child process per rank (one rank when it is not
distributed). All ranks share one process group, so that a timeout, a rank
that died while the others wait in a collective, or Ctrl-C ends every one of
them, and whatever they started, with one signal. Progress lines are relayed
from every rank as they come; the last log lines of each are kept for the
reason of a rank that died.
"""

from __future__ import annotations

import collections
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from runners.contract.result import ReleasedResource
from runners.harness import child
from runners.harness.exits import Exits
from runners.harness.processes import proc_table, stop_group, stop_popen

__all__ = ["Cancelled", "RankExit", "RankGroup"]

STOP_GRACE_S = 10.0
CANCEL_LOOK_S = 0.05
"""How often a wait for the ranks looks whether the caller stopped the claim."""
PEER_GRACE_S = 20.0
"""How long the other ranks may still run after one died without a result: they are
most likely blocked in a collective that will never complete."""


class Cancelled(Exception):
    """The caller stopped the claim (Ctrl-C while claims run side by side)."""


@dataclass(slots=True)
class RankExit:
    rank: int
    pid: int
    rc: int | None
    """Exit status (negative: killed by that signal); None: still running when stopped."""
    tail: str

    def how(self) -> str:
        if self.rc is None:
            return "was still running"
        if self.rc < 0:
            return f"was killed by signal {-self.rc}"
        return f"exited with status {self.rc}"


@dataclass(slots=True)
class RankGroup:
    """The processes of one claim, rank ``i`` at index ``i``."""

    procs: list[subprocess.Popen[str]] = field(default_factory=list)
    tails: list[collections.deque[str]] = field(default_factory=list)
    readers: list[threading.Thread] = field(default_factory=list)
    timed_out: bool = False
    first_death: int | None = None
    """The rank that ended first without a clean exit, if any."""

    @property
    def pgid(self) -> int:
        return self.procs[0].pid

    @classmethod
    def start(
        cls,
        argvs: Sequence[list[str]],
        *,
        progress: Callable[[str], None],
        envs: Sequence[dict[str, str]],
        preexec: Callable[[], None] | None = None,
    ) -> RankGroup:
        """Start rank 0 as a new process group (its pid is the group id), the others in it.
        ``preexec`` runs in each rank before its command (entering the claim's shared
        network namespace)."""
        group = cls()
        for rank, argv in enumerate(argvs):
            # Rank 0 leads a new group (not a new session: setpgid cannot join a group
            # across sessions); the group is not the terminal's, so Ctrl-C reaches only
            # the qualifier, which then ends the group.
            pgid = 0 if rank == 0 else group.pgid
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=envs[rank],
                    process_group=pgid,
                    preexec_fn=preexec,
                )
            except BaseException:
                group.stop()
                raise
            group.procs.append(proc)
            tail: collections.deque[str] = collections.deque(maxlen=8)
            group.tails.append(tail)
            prefix = f"rank {rank}: " if len(argvs) > 1 else ""
            t = threading.Thread(target=_relay, args=(proc, tail, progress, prefix), daemon=True)
            t.start()
            group.readers.append(t)
        return group

    def wait(
        self,
        *,
        timeout_s: float,
        died: Callable[[int, int], bool],
        cancel: threading.Event | None = None,
    ) -> None:
        """Wait for every rank until ``timeout_s`` has passed.

        ``died(rank, rc)`` says whether an exited rank ended without its result; once
        one has, the others get `PEER_GRACE_S` before they are stopped. `Cancelled`
        once ``cancel`` is set (the caller then stops the group)."""
        deadline = time.monotonic() + timeout_s
        with Exits(self.procs) as exits:
            while True:
                if cancel is not None and cancel.is_set():
                    raise Cancelled("stopped")
                codes = [p.poll() for p in self.procs]
                if all(c is not None for c in codes):
                    return
                if self.first_death is None:
                    for rank, rc in enumerate(codes):
                        if rc is not None and died(rank, rc):
                            self.first_death = rank
                            deadline = min(deadline, time.monotonic() + PEER_GRACE_S)
                            break
                left = deadline - time.monotonic()
                if left < 0:
                    self.timed_out = self.first_death is None
                    return
                # Woken by a rank's exit; a cancel (an event of another thread) is
                # looked for every `CANCEL_LOOK_S`.
                exits.wait(left if cancel is None else min(left, CANCEL_LOOK_S))

    def stop(self) -> list[ReleasedResource]:
        """End every rank and everything in their group: the proof for the group (naming
        any process found in it that was not a rank: a leaked child), then one per rank."""
        proofs: list[ReleasedResource] = []
        ranks = {p.pid for p in self.procs}
        leaked = []
        table = proc_table() or {}
        if self.procs:
            leaked = [
                f"pid {i.pid} ({i.comm})"
                for i in table.values()
                if i.pgid == self.pgid and i.pid not in ranks and i.state != "Z"
            ]
        for rank, proc in enumerate(self.procs):
            gone, why = stop_popen(proc, timeout_s=STOP_GRACE_S)
            why = f"rank {rank}: {why}"
            proofs.append(
                ReleasedResource(kind="process", id=str(proc.pid), released=gone, proof=why)
            )
        if self.procs:
            gone, why = stop_group(self.pgid, timeout_s=STOP_GRACE_S)
            if leaked:
                why = f"found in the group besides the ranks: {', '.join(leaked)}; {why}"
            proofs.insert(
                0,
                ReleasedResource(
                    kind="process-group",
                    id=str(self.pgid),
                    released=gone and not leaked,
                    proof=why,
                ),
            )
        for t in self.readers:
            t.join(timeout=STOP_GRACE_S)
        return proofs

    def exits(self) -> list[RankExit]:
        return [
            RankExit(rank=i, pid=p.pid, rc=p.returncode, tail=" | ".join(self.tails[i]))
            for i, p in enumerate(self.procs)
        ]


def _relay(
    proc: subprocess.Popen[str],
    tail: collections.deque[str],
    progress: Callable[[str], None],
    prefix: str,
) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        line = line.rstrip("\n")
        msg = child.progress_line(line)
        if msg is not None:
            progress(prefix + msg)
        elif line.strip():
            tail.append(line)
