"""A Ray worker's fork servers for one commit: its workload imported and prepared once.

A Ray worker runs claim after claim, of any pull request Ray places there. A
fork server that imported or prepared one pull request's workload runs that
pull request's code, so it serves the claims of that commit only: the first
claim of a commit on a worker launches the servers of the trees it needs (the
head's, and the base's where the check compares against it), each inside the
sandbox, importing torch, the plan's ``preload`` list, the modules earlier
claims of the workload were seen to import, and preparing the workload
(`runners.workloads.loader.prepare_workload`: the model built once on CPU,
shared by fork); the claims of that commit that follow fork from them. A
claim of another commit stops them first: one pull request's code at a time,
and one prepared model in memory.

Both trees' servers write only their commit's own folder, where each claim's
folder is made: gradient-compare's base arm, forked from the base tree's
server, writes its results into the claim's folder, as on a local run.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ledger.execution.claimrun import ClaimRun

if TYPE_CHECKING:
    from ledger.sandbox import Sandbox
    from runners.fork.forkparent import ForkServer
    from runners.fork.forkready import Ready

__all__ = ["CommitServers"]


@dataclass
class CommitServers:
    """The fork servers serving one commit's claims, by checkout root."""

    head: Path
    """The commit's checkout: the servers' key."""
    work: Path
    """The one folder the servers (and the claims forked from them) may write."""
    box: Sandbox
    code: Path
    """What the servers may read: the worker's checkouts."""
    servers: dict[str, ForkServer | None] = field(default_factory=dict)

    @classmethod
    def new(cls, head: Path, under: Path, box: Sandbox, code: Path) -> CommitServers:
        work = Path(tempfile.mkdtemp(prefix="commit-", dir=under))
        return cls(head, work, box, code)

    def alive(self) -> bool:
        """Whether every server launched is still running (None: none could start, and
        its claims start afresh; that does not change by launching again)."""
        return all(s is None or s.proc.poll() is None for s in self.servers.values())

    def ensure(
        self,
        roots: Sequence[Path],
        run: ClaimRun,
        preload: Sequence[str],
        tree: str = "",
        meanwhile: Callable[[], object] | None = None,
    ) -> None:
        """Launch the servers of ``roots`` not launched yet, together, and wait for them:
        each imports and prepares ``run``'s workload as its tree has it, and what earlier
        runs of the head's ``tree`` (its git tree id) learned it imports. ``meanwhile``
        runs here once they are launched, before they are waited for (this process's
        own imports, which would otherwise wait for the servers' and then be waited
        for); not where every server runs already."""
        from ledger.execution.local_run import server_confine, server_sandbox
        from runners.contract.childenv import env
        from runners.fork.forkparent import Launched, Spec
        from runners.fork.preload import recorded_modules

        missing = [r for r in roots if str(r) not in self.servers]
        if not missing:
            return
        ref = run.workload_ref
        modules = [*preload, *(recorded_modules([ref], tree) if ref else [])]
        specs = [Spec.of(r, [(ref, run.workload_params)], modules) for r in missing]
        wrap = server_sandbox(self.box, self.work, [self.code])
        confine = None if wrap is None else server_confine(self.box, self.work)
        launched = Launched.all(specs, env(), wrap=wrap, sock_dir=self.work, confine=confine)
        try:
            if meanwhile is not None:
                meanwhile()
            ready = launched.wait()
        except BaseException:
            # Ray's cancel lands here as KeyboardInterrupt: no server is left behind.
            launched.close()
            raise
        for r, server in zip(missing, ready, strict=True):
            self.servers[str(r)] = server

    def sockets(self) -> Mapping[str, str]:
        """Fork server socket by checkout root (``LEDGER_FORK_SERVERS``)."""
        return {root: str(s.sock) for root, s in self.servers.items() if s is not None}

    def env(self) -> dict[str, str]:
        """What a claim's processes need to fork each tree's processes from its server."""
        sockets = self.sockets()
        return {"LEDGER_FORK_SERVERS": json.dumps(dict(sockets))} if sockets else {}

    def of(self, root: Path) -> ForkServer | None:
        return self.servers.get(str(root))

    def close(self) -> None:
        import shutil

        for s in self.servers.values():
            if s is not None:
                s.close()
        self.servers.clear()
        shutil.rmtree(self.work, ignore_errors=True)

    def facts(self) -> Ready | None:
        """What the head tree's server did before its first claim (for the progress line);
        None where it could not start."""
        s = self.of(self.head)
        return s.ready if s is not None else None
