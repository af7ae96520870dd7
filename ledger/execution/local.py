"""The `local` executor: claims side by side on this host, each on devices of its own.

Each claim runs in a thread of its own that starts the claim's processes
(`runners.claim.isolated.run_claim_isolated`, forked from the fork server) with
``CUDA_VISIBLE_DEVICES`` naming its devices; the thread only waits. A claim
that fails or hangs ends by its own time limit and never holds up another;
`cancel` (Ctrl-C) stops every claim's process group.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.execution.claimlimit import ClaimLimit
from ledger.execution.claimrun import ClaimRun, Finished
from ledger.execution.devices import Device, visible_gpus
from ledger.execution.sharing import CHILD_VAR
from ledger.fleet.health import Watch

if TYPE_CHECKING:
    from ledger.sandbox import Sandbox
    from runners.fork.forkparent import ForkServer

__all__ = ["LocalExecutor"]


@dataclass
class LocalExecutor:
    root: Path
    """The revision's worktree."""
    base_root: Path | None
    artifacts: Path
    fork: ForkServer | None
    progress_for: Callable[[ClaimRun], Callable[[str], None]]
    fork_servers: dict[str, str] | None = None
    """Fork server socket by checkout root, for checks that start processes of their
    own per tree (gradient-compare's arms)."""
    slots: int = 1
    sandbox: Sandbox | None = None
    """None: unsandboxed (``--sandbox none``)."""
    work_root: Path | None = None
    """Where each claim's folder goes (one the sandbox can write)."""
    name: str = "local"
    diagnosed: dict[str, dict[str, Any]] = field(default_factory=dict)
    """``dcgmi diag`` per GPU UUID, run once per device before the claims."""

    def __post_init__(self) -> None:
        self.cancel = threading.Event()
        self._pool = cf.ThreadPoolExecutor(max_workers=max(1, self.slots))

    def submit(
        self, run: ClaimRun, devices: list[Device], explicit: bool, shared: bool = False
    ) -> cf.Future[Finished]:
        """Run ``run`` on ``devices`` (``shared``: beside other claims that may share them,
        `ledger.execution.sharing`)."""
        return self._pool.submit(self._run, run, devices, explicit, shared)

    def _run(
        self, run: ClaimRun, devices: list[Device], explicit: bool, shared: bool = False
    ) -> Finished:
        from runners.claim.isolated import run_claim_isolated

        env = self._env(devices, explicit, shared)
        uuids = tuple(d.uuid for d in devices if d.uuid)
        # The devices the claim can reach: its own, else every GPU of the host; none for
        # a claim on the CPU (a GPU's fault says nothing of it).
        watched = uuids if explicit else tuple(d.uuid for d in visible_gpus() if d.uuid)
        if run.device == "cpu":
            watched = ()
        watch = Watch(watched).start() if watched else None
        # A forked claim shares the fork server's sandbox with the claims beside it: a
        # process limit of its own, a share of the sandbox's (`ledger.sandbox.claimpids`).
        fork = None if run.network else self.fork
        limit = ClaimLimit.make(fork, run, self.slots, self.sandbox is not None)
        env.update(limit.env())
        request = run.request(
            self.root,
            self.base_root,
            self.artifacts,
            work_root=self.work_root,
            env=env,
            gpu_uuids=uuids or None,
            shared=shared,
        )
        try:
            results = run_claim_isolated(
                request,
                progress=limit.said(self.progress_for(run)),
                # The fork server has no network: a claim that needs one starts afresh.
                fork_server=fork,
                sandbox=self.sandbox,
                cancel=self.cancel,
            )
            facts = limit.facts(self.sandbox.facts()) if self.sandbox is not None else {}
        finally:
            limit.close()
        health = None
        if watch is not None:
            health = watch.finish().to_json()
            for dev in health["devices"]:
                if dev["uuid"] in self.diagnosed:
                    dev["dcgm_diag"] = self.diagnosed[dev["uuid"]]
        return Finished(
            run=run,
            executor=self.name,
            devices=tuple(d.index for d in devices) if explicit else (),
            gpu_uuids=uuids,
            results=results,
            host=socket.gethostname(),
            sandbox_facts=facts,
            artifacts=self.artifacts,
            health=health,
        )

    def _env(self, devices: list[Device], explicit: bool, shared: bool) -> dict[str, str]:
        """What the claim's processes are handed beside the child environment: its devices,
        its share of the host's cores on logical ones, the fork servers, sharing."""
        env: dict[str, str] = {}
        if shared:
            env[CHILD_VAR] = "1"
        if explicit:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(d.index for d in devices)
            if not any(d.uuid for d in devices):
                # Logical devices share the host's cores: each claim gets its part.
                env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // max(1, self.slots)))
        if self.fork_servers:
            import json

            env["LEDGER_FORK_SERVERS"] = json.dumps(self.fork_servers)
        return env

    def close(self) -> None:
        self.cancel.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
