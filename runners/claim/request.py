"""One claim to run in processes of its own, as one value: `ClaimRequest`.

What each rank runs (`runners.api.run_claim`'s arguments, written to its request
file) and how the parent runs the ranks (their number, the time limit, the network,
the environment, the GPUs). `runners.claim.isolated.run_claim_isolated` takes it. Imports no
torch: the ledger's executors build one from a plan's claim (`ClaimRun.request`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runners.claim.authors import Observed, authored, observe
from runners.claim.result import CheckResult, Json, infra_error

__all__ = ["DEFAULT_TIMEOUT_S", "ClaimRequest"]

DEFAULT_TIMEOUT_S = 1800
"""A claim's time limit when its caller states none (the plan's default, docs/plan.md)."""


@dataclass(frozen=True)
class ClaimRequest:
    """One claim to run in processes of its own: what each rank runs (`runners.api.run_claim`'s
    arguments) and how the parent runs its ranks. A value; what it runs with (the progress
    callback, a fork server, the sandbox, a cancel) are `run_claim_isolated`'s arguments."""

    claim: str
    check: str
    device: str
    """cpu | cuda | auto."""
    repo_root: Path
    workload_ref: str
    params: Mapping[str, Json] = field(default_factory=dict)
    workload_params: Mapping[str, Json] = field(default_factory=dict)
    observer_off_required: bool = False
    base_root: Path | None = None
    """The base revision's checkout, for a check that compares against it."""
    artifact_dir: Path | None = None
    """Where the claim writes its artifacts: the parent reads them only inside it."""
    world_size: int = 1
    timeout_s: float = DEFAULT_TIMEOUT_S
    """On it the claim's process group is killed: a failed "timed out after N s"."""
    distributed: bool | None = None
    """The ranks inside a process group (default: ``world_size > 1``); True at one rank
    exercises the multi-rank path on a single device."""
    network: bool = False
    """A network inside the sandbox; else none."""
    work_root: Path | None = None
    """Where the claim's folder goes (one the fork server's sandbox can write)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Added to every rank's environment (``CUDA_VISIBLE_DEVICES``: the claim's GPUs)."""
    gpu_uuids: Sequence[str] | None = None
    """The claim's GPUs: the exit proof reads these alone."""
    shared: bool = False
    """Other claims may run on its GPUs meanwhile (`runners.claim.names.DEVICE_SHARED_VAR`), so
    the devices' used memory proves nothing of this claim's."""

    @property
    def grouped(self) -> bool:
        """Whether its ranks run inside one process group."""
        return self.world_size > 1 if self.distributed is None else self.distributed

    def code(self) -> list[Path]:
        """The trees its ranks read."""
        return [p for p in (self.repo_root, self.base_root) if p is not None]

    def body(self) -> dict[str, Json]:
        """What each rank's request carries: `runners.api.run_claim`'s arguments."""
        return {
            "device": self.device,
            "claim": self.claim,
            "check": self.check,
            "params": dict(self.params),
            "repo_root": str(self.repo_root),
            "workload_ref": self.workload_ref,
            "workload_params": dict(self.workload_params),
            "observer_off_required": self.observer_off_required,
            "base_root": None if self.base_root is None else str(self.base_root),
            "artifact_dir": None if self.artifact_dir is None else str(self.artifact_dir),
        }

    def observed(self) -> Observed:
        """The host's facts about the claim, read from outside it (`runners.claim.authors`)."""
        return observe(
            self.device,
            self.gpu_uuids,
            env=self.env,
            outside=[Path(str(p)) for p in self.code()],
            ranks=self.world_size if self.grouped and self.device != "cpu" else None,
        )

    def not_started(self, reason: str) -> CheckResult:
        """An infra-error for a claim that did not start (none of its code ran), each fact
        by its author."""
        r = infra_error(
            claim=self.claim,
            check=self.check,
            version="unknown",
            params=dict(self.params),
            scope={"device_kind": self.device},
            reason=reason,
            started_ns=time.time_ns(),
            finished_ns=time.time_ns(),
        )
        authored([r], self.observed())
        # The parent's own observation, before any of the claim's code ran: it stays an
        # infrastructure error (`authored` makes only a claim's word of one `failed`).
        r.outcome, r.reason = "infra-error", reason
        return r
