"""What a check body works with: its context, its session on the harness, its verdict."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import torch

from runners.contract.result import Artifact, CheckResult, Json, Observer, Outcome, infra_error
from runners.harness.fingerprint import Fingerprint
from runners.harness.observer import ObserverSession
from runners.harness.oom import StepOutcome, capture
from runners.harness.probe import MemoryProbe
from runners.harness.registry import ResourceRegistry
from runners.protocol import (
    AdmissionDecision,
    Batch,
    EstimatorMissing,
    ForwardOutputs,
    MemoryEstimate,
    Phase,
    Shape,
    Workload,
    admit_of,
    enter_mode,
    estimate_of,
)
from runners.workloads import prebuilt
from runners.workloads.loader import load_workload

Progress = Callable[[str], None]

# Modules a workload load must not replace (see `load_preserving`), and the packages
# they lie in.
_KEEP = (
    "runners.harness",
    "runners.checks",
    "runners.api",
    "runners.contract.result",
    "runners.protocol",
)
_KEEP_PACKAGES = ("runners", "runners.contract")


@dataclass(kw_only=True, slots=True)
class CheckContext:
    """Where and on what a check runs."""

    claim: str
    repo_root: Path
    workload_ref: str
    workload_params: dict[str, Json]
    device: torch.device
    fingerprint: Fingerprint
    artifact_dir: Path
    """Artifacts written here must outlive the check (the ledger hashes them later)."""
    observer: Observer = "off"
    base_root: Path | None = None
    """Checkout of the base revision (gradient comparison, the 24-view regression's base
    comparison); None: no base tree was handed."""
    shared: dict[str, Any] = field(default_factory=dict)
    """What runs of one claim share (the same dict in every copy `dataclasses.replace`
    makes): the observer-off control's two runs reuse the base's arms through it."""
    progress: Progress = field(default=lambda _msg: None)


@dataclass(kw_only=True, slots=True)
class Verdict:
    """A check body's finding."""

    outcome: Outcome
    reason: str | None
    measurements: dict[str, Json] = field(default_factory=dict)
    artifacts: list[Artifact] = field(default_factory=list)
    scope: dict[str, str | int] = field(default_factory=dict)
    """Facets added to (or overriding) the fingerprint's."""


class WorkloadFailed(Exception):
    """A workload call failed; carries the captured outcome."""

    def __init__(self, outcome: StepOutcome) -> None:
        super().__init__(outcome.sentence())
        self.outcome = outcome


def verdict_of_failure(
    outcome: StepOutcome, measurements: dict[str, Json] | None = None
) -> Verdict:
    """``failed`` for a workload error, an OOM or an environment error alike: inside the
    claim process the code under test can raise whatever an environment raises, so only
    the parent's own readings of a device fault make an ``infra-error``
    (`ledger.fleet.faults.judge`); the failure's class stays in its measurements."""
    m = dict(measurements or {})
    m["failure"] = outcome.measurements()
    if outcome.error_type == EstimatorMissing.__name__:
        return Verdict(outcome="inconclusive", reason=outcome.message, measurements=m)
    return Verdict(outcome="failed", reason=outcome.sentence(), measurements=m)


def load_preserving(root: Path, ref: str, params: Mapping[str, Any]) -> Workload:
    """`load_workload`, keeping this process's harness, check and result modules.

    The loader forgets and re-imports a top-level package the checkout provides;
    when the checkout is this project, that would give the harness a second copy of
    its own modules (and result classes) mid-check.
    """
    saved: dict[str, ModuleType] = {
        n: m for n, m in sys.modules.items() if n in _KEEP_PACKAGES or n.startswith(_KEEP)
    }
    try:
        return load_workload(root, ref, params)
    finally:
        sys.modules.update(saved)


_MODES: dict[str, str] = {}
"""The mode each phase ran in since `modes_seen` last read it (``not offered`` where the
workload does not offer one; `runners.protocol.SupportsModes`)."""


def entered(w: Workload, grad: bool) -> None:
    """Tell ``w`` the mode of the step about to run, and note it for the receipt."""
    mode = enter_mode(w, grad)
    _MODES["forward_backward" if grad else "forward_nograd"] = mode or "not offered"


def modes_seen() -> dict[str, str]:
    """The modes the phases ran in since the last call (what a receipt records as
    ``workload_modes``), then forgotten."""
    out = dict(sorted(_MODES.items()))
    _MODES.clear()
    return out


def phase_step(w: Workload, batch: Batch, *, grad: bool) -> Callable[[], ForwardOutputs]:
    """One phase over ``batch`` (``grad``: forward_backward, else forward_nograd), in the
    mode a trainer runs it (`entered`); the outputs are returned so they stay live until
    the measurement window closes."""

    def step() -> ForwardOutputs:
        entered(w, grad)
        out = w.forward(batch, grad=grad)
        if grad:
            w.backward(out)
        return out

    return step


_T = TypeVar("_T")


def seeded(fn: Callable[[], _T], seed: int, device: torch.device) -> Callable[[], _T]:
    """``fn`` from the same random state every time it runs (``seed``): a forward that
    draws random numbers (dropout a workload leaves on) draws the same ones in every
    run and arm, so repeating it compares the code, not the draws."""

    def again() -> _T:
        torch.manual_seed(seed)
        if device.type == "cuda":
            torch.cuda.manual_seed(seed)
        return fn()

    return again


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class Session:
    """A check body's handle on the harness: probe, registry, observer, workload."""

    def __init__(
        self,
        ctx: CheckContext,
        probe: MemoryProbe,
        registry: ResourceRegistry,
        observer: ObserverSession,
        seed: int,
    ) -> None:
        self.ctx = ctx
        self.probe = probe
        self.registry = registry
        self.observer = observer
        self.seed = seed
        self.workload: Workload | None = None
        self.workload_scope: dict[str, str | int] = {}
        self.steps_measured = 0
        """Measured workload steps so far; the first one runs cold (first in the process
        for this workload: workspaces, lazy kernels), later ones warm."""
        self.phases_ns: dict[str, int] = {}
        """Nanoseconds spent loading the workload (import, factory, digest) and in its
        setups: recorded as ``harness_phase_times``."""
        self.phases_run: set[str] = set()
        """Phases that have run a measured step in this process (see `cold`)."""

    def cold(self, phase: Phase) -> bool:
        """Whether no step of ``phase`` has run in this process yet: what the workload's
        `estimate` / `admit` are told as ``cold``."""
        return phase not in self.phases_run

    def ran(self, phase: Phase) -> None:
        """Note a measured step of ``phase``: later ones are warm."""
        self.steps_measured += 1
        self.phases_run.add(phase)

    def admit(self, w: Workload, shape: Shape, phase: Phase, free: int) -> AdmissionDecision:
        """``w.admit`` told whether ``phase`` is cold, through `call` (captured)."""
        cold = self.cold(phase)
        got: AdmissionDecision = self.call(
            f"admit {phase} {shape}", lambda: admit_of(w, shape, phase, free, cold=cold)
        )
        return got

    def estimate(self, w: Workload, shape: Shape, phase: Phase) -> MemoryEstimate:
        """``w.estimate`` told whether ``phase`` is cold, through `call` (captured)."""
        cold = self.cold(phase)
        got: MemoryEstimate = self.call(
            f"estimate {phase} {shape}", lambda: estimate_of(w, shape, phase, cold=cold)
        )
        return got

    @property
    def device(self) -> torch.device:
        return self.probe.device

    def progress(self, msg: str) -> None:
        self.ctx.progress(msg)

    def call(self, what: str, fn: Callable[[], Any]) -> Any:
        """Call into the workload; raise `WorkloadFailed` with the captured outcome."""
        cap = capture(what, fn, device=self.device)
        if not cap.outcome.ok:
            raise WorkloadFailed(cap.outcome)
        return cap.value

    def load(self, params: Mapping[str, Any] | None = None, root: Path | None = None) -> Workload:
        """Load the context's workload (optionally other params / checkout); set it up."""
        ctx = self.ctx
        wparams = dict(ctx.workload_params if params is None else params)
        t0 = time.monotonic_ns()
        w: Workload = load_preserving(root or ctx.repo_root, ctx.workload_ref, wparams)
        self.workload_scope = {
            "workload": w.name,
            "workload_digest": w.digest(),
            "dtype": dtype_name(w.dtype),
        }
        self.workload = w
        t1 = time.monotonic_ns()
        self.progress(f"setup {w.name} on {self.device}")
        self.call("setup", lambda: prebuilt.setup(w, self.device, self.seed))
        # Where a claim's time goes before its first step (summed over its setups).
        self.phases_ns["load_ns"] = self.phases_ns.get("load_ns", 0) + t1 - t0
        self.phases_ns["setup_ns"] = self.phases_ns.get("setup_ns", 0) + time.monotonic_ns() - t1
        return w

    def close(self) -> None:
        """Tear the workload down and drop it, so its memory can return."""
        w, self.workload = self.workload, None
        if w is not None:
            capture("teardown", w.teardown, device=self.device)


def base_scope(ctx: CheckContext) -> dict[str, str | int]:
    """The scope facets known before the workload is loaded."""
    return {
        **ctx.fingerprint.scope(),
        "workload": ctx.workload_ref,
        "workload_digest": "",
        "dtype": "",
    }


COULD_NOT_RUN = "could_not_run"
"""The measurement that says what a check could not do with what it was handed (the
parent reads it: such a receipt is never run again on the base)."""


def could_not_run(
    ctx: CheckContext, *, check: str, version: str, params: Mapping[str, Json], why: str
) -> CheckResult:
    """An inconclusive result for a check that could not run as asked with what it was
    handed (``why``: `needs 2 CUDA devices; 1 handed`): neither the code's failure nor an
    infrastructure error, which only the parent's own readings make."""
    r = infra_result(
        ctx, check=check, version=version, params=params, reason=f"could not run: {why}"
    )
    r.outcome = "inconclusive"
    r.measurements[COULD_NOT_RUN] = why
    return r


def infra_result(
    ctx: CheckContext, *, check: str, version: str, params: Mapping[str, Json], reason: str
) -> CheckResult:
    """A result for a check that could not run at all (no device). Said by the claim
    process, so the parent records it as a failure unless its own readings show the
    device gone (`runners.claim.authors`)."""
    now = time.time_ns()
    return infra_error(
        claim=ctx.claim,
        check=check,
        version=version,
        params=params,
        reason=reason,
        scope=base_scope(ctx),
        observer=ctx.observer,
        gpu_uuids=ctx.fingerprint.gpu_uuids,
        host=ctx.fingerprint.host,
        started_ns=now,
        finished_ns=now,
    )
