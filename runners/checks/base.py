"""What every check shares: its context, the harness around its body, results.

`execute` runs a check body inside the harness: memory probe session,
determinism settings, a resource registry (released and proven also on
KeyboardInterrupt, which is then re-raised), and the observer. A failure in
the workload becomes a ``failed`` verdict, an environment or harness problem
an ``infra-error``; neither escapes as an exception.
"""

from __future__ import annotations

import math
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from runners.harness.cleanup import ResourceRegistry, describe_incomplete
from runners.harness.determinism import apply_determinism
from runners.harness.fingerprint import Fingerprint
from runners.harness.observer import ObserverSession
from runners.harness.oom import StepOutcome, capture
from runners.harness.probe import CpuProbe, MemoryProbe, make_probe
from runners.protocol import Batch, ForwardOutputs, Workload
from runners.result import Artifact, CheckResult, CleanupProof, Json, Observer, Outcome
from runners.workloads.loader import WorkloadLoadError, load_workload

Progress = Callable[[str], None]

# Modules a workload load must not replace (see `load_preserving`).
_KEEP = ("runners.harness", "runners.checks", "runners.api", "runners.result", "runners.protocol")


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
    """Checkout of the base revision (gradient comparison); None: same as repo_root."""
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
    """``failed`` for a workload error or OOM, ``infra-error`` for an environment one."""
    m = dict(measurements or {})
    m["failure"] = outcome.measurements()
    kind: Outcome = "infra-error" if outcome.status == "infra-error" else "failed"
    return Verdict(outcome=kind, reason=outcome.sentence(), measurements=m)


def load_preserving(root: Path, ref: str, params: Mapping[str, Any]) -> Workload:
    """`load_workload`, keeping this process's harness, check and result modules.

    The loader forgets and re-imports a top-level package the checkout provides;
    when the checkout is this project, that would give the harness a second copy of
    its own modules (and result classes) mid-check.
    """
    saved: dict[str, ModuleType] = {
        n: m for n, m in sys.modules.items() if n == "runners" or n.startswith(_KEEP)
    }
    try:
        return load_workload(root, ref, params)
    finally:
        sys.modules.update(saved)


def phase_step(w: Workload, batch: Batch, *, grad: bool) -> Callable[[], ForwardOutputs]:
    """One phase over ``batch`` (``grad``: forward_backward, else forward_nograd); the
    outputs are returned so they stay live until the measurement window closes."""

    def step() -> ForwardOutputs:
        out = w.forward(batch, grad=grad)
        if grad:
            w.backward(out)
        return out

    return step


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
        w: Workload = load_preserving(root or ctx.repo_root, ctx.workload_ref, wparams)
        self.workload_scope = {
            "workload": w.name,
            "workload_digest": w.digest(),
            "dtype": dtype_name(w.dtype),
        }
        self.workload = w
        self.progress(f"setup {w.name} on {self.device}")
        self.call("setup", lambda: w.setup(self.device, self.seed))
        return w

    def close(self) -> None:
        """Tear the workload down and drop it, so its memory can return."""
        w, self.workload = self.workload, None
        if w is not None:
            capture("teardown", w.teardown, device=self.device)


def execute(
    ctx: CheckContext,
    *,
    check: str,
    version: str,
    params: dict[str, Json],
    body: Callable[[Session], Verdict],
    budget_bytes: int | None = None,
) -> CheckResult:
    """Run ``body`` under the harness and turn its verdict into a `CheckResult`."""
    started_ns = time.time_ns()
    seed = int(params.get("seed", 0) or 0)  # type: ignore[arg-type]
    warn_only = bool(params.get("deterministic_warn_only", True))
    tolerance = params.get("cleanup_tolerance_bytes")
    recorded: dict[str, Json] = dict(params)
    scope: dict[str, str | int] = {
        **ctx.fingerprint.scope(),
        "workload": ctx.workload_ref,
        "workload_digest": "",
        "dtype": "",
    }
    common: dict[str, Json] = {}
    empty_proof = CleanupProof(complete=False, resources=[])

    def result(v: Verdict, proof: CleanupProof, observer: Observer) -> CheckResult:
        m = json_safe({**common, **v.measurements})
        assert isinstance(m, dict)
        if not proof.complete and v.outcome == "passed":
            m["cleanup_incomplete"] = describe_incomplete(proof)
        return CheckResult(
            claim=ctx.claim,
            check=check,
            check_version=version,
            params=recorded,
            scope={**scope, **v.scope},
            outcome=v.outcome,
            reason=v.reason if v.outcome != "passed" else None,
            measurements=m,
            observer=observer,
            cleanup=proof,
            artifacts=v.artifacts,
            gpu_uuids=list(ctx.fingerprint.gpu_uuids),
            host=ctx.fingerprint.host,
            started_ns=started_ns,
            finished_ns=time.time_ns(),
        )

    try:
        probe = make_probe(ctx.device, budget_bytes=budget_bytes)
        recorded["determinism"] = apply_determinism(seed=seed, warn_only=warn_only)
    except Exception as e:
        v = Verdict(outcome="infra-error", reason=f"harness setup: {type(e).__name__}: {e}")
        return result(v, empty_proof, ctx.observer)

    common["probe"] = probe.name
    verdict: Verdict | None = None
    tol = None if tolerance is None else int(tolerance)  # type: ignore[arg-type]
    reg = ResourceRegistry(probe=probe, tolerance_bytes=tol)
    obs = ObserverSession(
        enabled=ctx.observer == "on",
        probe=probe,
        artifact_dir=ctx.artifact_dir,
        # Unique per run: several runs of one check share the artifact dir.
        name=f"{check}-{ctx.device.type}-{started_ns}",
    )
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with probe.session(), reg, obs:
                verdict = _run_body(ctx, check, body, Session(ctx, probe, reg, obs, seed), scope)
    except Exception as e:
        # The harness itself failed (registry, observer, probe): not evidence either way.
        verdict = Verdict(
            outcome="infra-error",
            reason=f"harness: {type(e).__name__}: {e}{capture_where(e)}",
        )
        caught = []
    finally:
        if isinstance(probe, CpuProbe):
            probe.close()
    nondet = [str(w.message) for w in caught if "determinis" in str(w.message)]
    common["nondeterministic_op_warnings"] = len(nondet)
    if nondet:
        common["nondeterministic_op_warning_samples"] = sorted(set(nondet))[:5]  # type: ignore[assignment]
    if isinstance(probe, CpuProbe):
        common["budget_source"] = probe.budget_source
        if probe.budget_bytes is not None:
            common["budget_bytes"] = probe.budget_bytes
    assert verdict is not None
    verdict.measurements.update(obs.summary)
    verdict.artifacts = [*verdict.artifacts, *obs.artifacts]
    proof = reg.proof or empty_proof
    return result(verdict, proof, obs.state)


def _run_body(
    ctx: CheckContext,
    check: str,
    body: Callable[[Session], Verdict],
    sess: Session,
    scope: dict[str, str | int],
) -> Verdict:
    """The body's verdict; its failures as verdicts. Returning drops the body's frame
    (and the workload, torn down) before the registry proves memory released."""
    try:
        return body(sess)
    except WorkloadFailed as wf:
        return verdict_of_failure(wf.outcome)
    except WorkloadLoadError as e:
        return Verdict(outcome="infra-error", reason=f"workload load: {e}")
    except ParamError as e:
        return Verdict(outcome="infra-error", reason=f"bad parameter: {e}")
    except Exception as e:
        return Verdict(
            outcome="infra-error",
            reason=f"check {check} raised {type(e).__name__}: {e}{capture_where(e)}",
        )
    finally:
        scope.update(sess.workload_scope)
        sess.close()


def json_safe(value: object) -> Json:
    """``value`` as canonical-JSON-safe data: tuples become lists, and non-finite
    floats (which RFC 8785 cannot encode) become the strings 'NaN', 'Infinity',
    '-Infinity'."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return str(value)


def capture_where(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    return f" at {tb[-1].filename}:{tb[-1].lineno}" if tb else ""


def infra_result(
    ctx: CheckContext, *, check: str, version: str, params: dict[str, Json], reason: str
) -> CheckResult:
    """A result for a check that could not run at all (no device, bad parameters)."""
    now = time.time_ns()
    return CheckResult(
        claim=ctx.claim,
        check=check,
        check_version=version,
        params=dict(params),
        scope={
            **ctx.fingerprint.scope(),
            "workload": ctx.workload_ref,
            "workload_digest": "",
            "dtype": "",
        },
        outcome="infra-error",
        reason=reason,
        measurements={},
        observer=ctx.observer,
        cleanup=CleanupProof(complete=True, resources=[]),
        gpu_uuids=list(ctx.fingerprint.gpu_uuids),
        host=ctx.fingerprint.host,
        started_ns=now,
        finished_ns=now,
    )


def int_param(params: Mapping[str, Json], key: str, default: int) -> int:
    v = params.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ParamError(f"parameter {key!r} must be an integer, got {v!r}")
    return v


def float_param(params: Mapping[str, Json], key: str, default: float) -> float:
    v = params.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ParamError(f"parameter {key!r} must be a number, got {v!r}")
    return float(v)


def int_list_param(params: Mapping[str, Json], key: str, default: list[int]) -> list[int]:
    v = params.get(key, default)
    if (
        not isinstance(v, list)
        or not v
        or not all(isinstance(x, int) and not isinstance(x, bool) for x in v)
    ):
        raise ParamError(f"parameter {key!r} must be a non-empty list of integers, got {v!r}")
    return [int(x) for x in v]  # type: ignore[arg-type]


class ParamError(ValueError):
    """A check parameter has the wrong type or value."""
