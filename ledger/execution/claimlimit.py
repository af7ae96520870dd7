"""A forked claim's own process limit, as the executor that runs it holds it.

The limit itself is the sandbox's room (`ledger.sandbox.claimpids`: the claim's pids
cgroup, what the claim forks placed there, the proof the claim process gives from
inside). Here only what a local run and a Ray task both do around one claim: make it
before the claim starts, hand its client the cgroup, notice the claim started afresh
in a sandbox of its own (the fork server refused it), and say it in the receipt.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ledger.execution.claimrun import ClaimRun

if TYPE_CHECKING:
    from ledger.sandbox.claimpids import ClaimPids
    from runners.fork.forkparent import ForkServer

__all__ = ["ClaimLimit"]


@dataclass
class ClaimLimit:
    """One claim's process limit: its pids cgroup where it runs forked, else none."""

    forked: bool
    """Forked from a fork server that forks (the claim shares its sandbox)."""
    pids: ClaimPids | None
    afresh: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def make(
        cls, fork: ForkServer | None, run: ClaimRun, share: int, sandboxed: bool
    ) -> ClaimLimit:
        """For ``run`` forked from ``fork`` (None: started afresh), one of ``share``
        claims that may run at once from it."""
        forked = fork is not None and not fork.ready.fork_refused and run.world_size == 1
        if not forked or not sandboxed or fork is None:
            return cls(forked, None)
        from ledger.sandbox.claimpids import ClaimPids

        return cls(forked, ClaimPids.make(fork.proc.pid, share))

    def env(self) -> dict[str, str]:
        """What the claim's client is told (`runners.fork.forkclient.pids_env`)."""
        if self.pids is None:
            return {}
        from runners.fork.forkclient import pids_env

        return pids_env(self.pids.path, self.pids.note)

    def said(self, progress: Callable[[str], None]) -> Callable[[str], None]:
        """``progress``, noticing the line that says the claim started afresh."""
        from runners.claim.isolated import AFRESH

        def said(line: str) -> None:
            if line.endswith(AFRESH):
                self.afresh.set()  # refused by the fork server: in a sandbox of its own now
            progress(line)

        return said

    def facts(self, facts: dict[str, str]) -> dict[str, str]:
        """The sandbox's ``facts`` with the claim's own limit and its proof
        (`ledger.sandbox.claimpids.claim_facts`); read before `close`."""
        from ledger.sandbox.claimpids import claim_facts

        return claim_facts(facts, self.forked, self.afresh.is_set(), self.pids)

    def close(self) -> None:
        if self.pids is not None:
            self.pids.close()
