"""One claim as one value, from the plan to the claim's processes and back: `Claim`.

`Claim` is what a plan says of a claim once sized (the ledger's `ClaimRun` is one,
with its place in the run); `ClaimRequest` is that value and where it runs: what each
rank runs (`runners.api.run_claim`'s arguments, written to its request file, `body`)
and how the parent runs the ranks (the checkouts, the folders, the environment, the
GPUs). `runners.claim.isolated.run_claim_isolated` takes it, and the parent stamps the
host's facts on the results once (`runners.claim.authors.stamp`). Imports no torch and
nothing that runs a claim: the ledger's executors build one from a plan's claim
(`ClaimRun.request`), never copying its fields.

The request file each rank reads is written and read by one installation: the parent
writes it, and the claim process (started afresh, or forked from a fork server this
parent launched) reads it at once. None crosses versions; its keys are
`runners.api.run_claim`'s arguments, which a test holds.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runners.contract.result import CheckResult, Json, infra_error

__all__ = ["DEFAULT_TIMEOUT_S", "Claim", "ClaimRequest"]

DEFAULT_TIMEOUT_S = 1800
"""A claim's time limit when its caller states none (the plan's default, docs/plan.md)."""


@dataclass(frozen=True, slots=True)
class Claim:
    """One claim as the plan states it, sized by the profile: the check that judges it
    with its parameters, the workload it runs, on what, how long, with what around it.
    The one value from the plan to the claim's processes and back: the request carries
    it whole, and the host stamps its network and profile on the results."""

    claim: str
    check: str
    device: str
    """cpu | cuda | auto, as `ledger qualify --device`."""
    workload_ref: str
    params: Mapping[str, Json] = field(default_factory=dict)
    workload_params: Mapping[str, Json] = field(default_factory=dict)
    observer_off: bool = False
    """With an observer-on run, the observer-off control runs too."""
    world_size: int = 1
    timeout_s: float = DEFAULT_TIMEOUT_S
    """On it the claim's process group is killed: a failed "timed out after N s"."""
    network: bool = False
    """The claim runs with a network (the plan allows it); else none, in its sandbox."""
    profile: str | None = None
    """The profile that sized it (the receipts' ``profile`` facet), if any."""


@dataclass(frozen=True)
class ClaimRequest:
    """One claim to run in processes of its own: the claim (`Claim`, whole) and where its
    ranks run. A value; what it runs with (the progress callback, a fork server, the
    sandbox, a cancel) are `run_claim_isolated`'s arguments."""

    run: Claim
    repo_root: Path
    base_root: Path | None = None
    """The base revision's checkout, for a check that compares against it."""
    artifact_dir: Path | None = None
    """Where the claim writes its artifacts: the parent reads them only inside it."""
    distributed: bool | None = None
    """The ranks inside a process group (default: ``world_size > 1``); True at one rank
    exercises the multi-rank path on a single device."""
    work_root: Path | None = None
    """Where the claim's folder goes (one the fork server's sandbox can write)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Added to every rank's environment (``CUDA_VISIBLE_DEVICES``: the claim's GPUs)."""
    gpu_uuids: Sequence[str] | None = None
    """The claim's GPUs: the exit proof reads these alone."""
    shared: bool = False
    """Other claims may run on its GPUs meanwhile (`runners.contract.names.DEVICE_SHARED_VAR`), so
    the devices' used memory proves nothing of this claim's."""

    @property
    def grouped(self) -> bool:
        """Whether its ranks run inside one process group."""
        return self.run.world_size > 1 if self.distributed is None else self.distributed

    def code(self) -> list[Path]:
        """The trees its ranks read."""
        return [p for p in (self.repo_root, self.base_root) if p is not None]

    def body(self) -> dict[str, Json]:
        """What each rank's request carries: `runners.api.run_claim`'s arguments."""
        c = self.run
        return {
            "device": c.device,
            "claim": c.claim,
            "check": c.check,
            "params": dict(c.params),
            "repo_root": str(self.repo_root),
            "workload_ref": c.workload_ref,
            "workload_params": dict(c.workload_params),
            "observer_off_required": c.observer_off,
            "base_root": None if self.base_root is None else str(self.base_root),
            "artifact_dir": None if self.artifact_dir is None else str(self.artifact_dir),
        }

    def not_started(self, reason: str) -> CheckResult:
        """An infra-error for a claim that did not start (none of its code ran): the
        host's own word, stamped as such (`runners.claim.authors.stamp` with
        ``claims_word=False``)."""
        c = self.run
        return infra_error(
            claim=c.claim,
            check=c.check,
            version="unknown",
            params=dict(c.params),
            scope={"device_kind": c.device},
            reason=reason,
            started_ns=time.time_ns(),
            finished_ns=time.time_ns(),
        )
