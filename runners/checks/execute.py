"""The harness around a check body: `execute` turns a body's verdict into a result.

`execute` runs a check body inside the harness: memory probe session,
determinism settings, a resource registry (released and proven also on
KeyboardInterrupt, which is then re-raised), and the observer. A failure in
the workload, the harness or the environment becomes a ``failed`` verdict (a
bad parameter an ``inconclusive`` one); none escapes as an exception. This
process imported the pull request's code, which can raise what an environment
raises, so it never says ``infra-error``: only the parent's own readings (a
device fault through NVML, the host's disk) do.
"""

from __future__ import annotations

import math
import time
import traceback
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from runners.checks.context import (
    CheckContext,
    Session,
    Verdict,
    WorkloadFailed,
    base_scope,
    modes_seen,
    verdict_of_failure,
)
from runners.checks.params import CheckParams, ParamError
from runners.contract.result import CheckResult, CleanupProof, Json, Observer
from runners.harness.determinism import apply_determinism
from runners.harness.observer import ObserverSession
from runners.harness.probe import CpuProbe, MemoryProbe, make_probe
from runners.harness.proofs import describe_incomplete
from runners.harness.registry import ResourceRegistry
from runners.protocol import EstimatorMissing
from runners.workloads import prebuilt
from runners.workloads.loader import WorkloadLoadError


def start_harness(
    device: torch.device, *, seed: int, warn_only: bool, budget_bytes: int | None = None
) -> tuple[MemoryProbe, dict[str, Json]]:
    """The probe for ``device`` and the determinism settings applied (recorded as the
    ``determinism`` parameter)."""
    probe = make_probe(device, budget_bytes=budget_bytes)
    return probe, apply_determinism(seed=seed, warn_only=warn_only)


@dataclass(kw_only=True, slots=True)
class _Run:
    """What every result of one `execute` call shares."""

    ctx: CheckContext
    check: str
    version: str
    recorded: dict[str, Json]
    scope: dict[str, str | int]
    started_ns: int
    common: dict[str, Json] = field(default_factory=dict)

    def result(self, v: Verdict, proof: CleanupProof, observer: Observer) -> CheckResult:
        m = json_safe({**self.common, **v.measurements})
        assert isinstance(m, dict)
        if not proof.complete and v.outcome == "passed":
            m["cleanup_incomplete"] = describe_incomplete(proof)
        fp = self.ctx.fingerprint
        return CheckResult(
            claim=self.ctx.claim,
            check=self.check,
            check_version=self.version,
            params=self.recorded,
            scope={**self.scope, **v.scope},
            outcome=v.outcome,
            reason=v.reason if v.outcome != "passed" else None,
            measurements=m,
            observer=observer,
            cleanup=proof,
            artifacts=v.artifacts,
            gpu_uuids=list(fp.gpu_uuids),
            host=fp.host,
            started_ns=self.started_ns,
            finished_ns=time.time_ns(),
        )


def execute(
    ctx: CheckContext,
    *,
    check: str,
    version: str,
    params: CheckParams,
    recorded: Mapping[str, Json],
    body: Callable[[Session], Verdict],
    seed: int = 0,
    budget_bytes: int | None = None,
    tolerance_bytes: int | None = None,
) -> CheckResult:
    """Run ``body`` under the harness and turn its verdict into a `CheckResult`.

    ``recorded``: the parameters as the receipt records them; ``tolerance_bytes``
    None: the registry's default for the device."""
    run = _Run(
        ctx=ctx,
        check=check,
        version=version,
        recorded=dict(recorded),
        scope=base_scope(ctx),
        started_ns=time.time_ns(),
    )
    empty_proof = CleanupProof(complete=False, resources=[])
    t0 = time.monotonic_ns()
    try:
        probe, run.recorded["determinism"] = start_harness(
            ctx.device,
            seed=seed,
            warn_only=params.deterministic_warn_only,
            budget_bytes=budget_bytes,
        )
    except Exception as e:
        v = Verdict(outcome="failed", reason=f"harness setup: {type(e).__name__}: {e}")
        return run.result(v, empty_proof, ctx.observer)

    run.common["probe"] = probe.name
    phases: dict[str, int] = {"harness_start_ns": time.monotonic_ns() - t0}
    prebuilt.routes()  # this run's setups only
    modes_seen()  # and this run's modes
    reg = ResourceRegistry(probe=probe, tolerance_bytes=tolerance_bytes)
    obs = ObserverSession(
        enabled=ctx.observer == "on",
        probe=probe,
        artifact_dir=ctx.artifact_dir,
        # Unique per run: several runs of one check share the artifact dir.
        name=f"{check}-{ctx.device.type}-{run.started_ns}",
    )
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with probe.session(), reg, obs:
                sess = Session(ctx, probe, reg, obs, seed)
                sess.phases_ns = phases
                verdict = _run_body(ctx, check, body, sess, run.scope)
    except Exception as e:
        # The harness failed (registry, observer, probe) in a process the code under
        # test shares: its failure, unless the parent reads a device fault.
        verdict = Verdict(
            outcome="failed",
            reason=f"harness: {type(e).__name__}: {e}{capture_where(e)}",
        )
        caught = []
    finally:
        if isinstance(probe, CpuProbe):
            probe.close()
    run.common.update(_harness_measurements(probe, caught))
    run.common["harness_phase_times"] = dict[str, Json](phases)
    modes = modes_seen()
    if modes:
        # The mode each phase ran in (evaluation for no-grad, training for gradient
        # steps; "not offered" where the workload keeps its own: runners.protocol, Modes).
        run.common["workload_modes"] = dict[str, Json](modes)
    setups = prebuilt.routes()
    if setups:
        # How the workload was built: its own setup, its prepare(), or the fork server's
        # snapshot copied (runners.workloads.prebuilt).
        run.common["setup_routes"] = list[Json](setups)
    verdict.measurements.update(obs.summary)
    verdict.artifacts = [*verdict.artifacts, *obs.artifacts]
    return run.result(verdict, reg.proof or empty_proof, obs.state)


def _harness_measurements(
    probe: MemoryProbe, caught: list[warnings.WarningMessage]
) -> dict[str, Json]:
    m: dict[str, Json] = {}
    nondet = [str(w.message) for w in caught if "determinis" in str(w.message)]
    m["nondeterministic_op_warnings"] = len(nondet)
    if nondet:
        m["nondeterministic_op_warning_samples"] = list(sorted(set(nondet))[:5])
    if isinstance(probe, CpuProbe):
        m["budget_source"] = probe.budget_source
        if probe.budget_bytes is not None:
            m["budget_bytes"] = probe.budget_bytes
    return m


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
        return Verdict(outcome="failed", reason=f"workload load: {e}")
    except ParamError as e:
        # The plan's parameters, not the code: nothing found either way.
        return Verdict(outcome="inconclusive", reason=f"bad parameter: {e}")
    except EstimatorMissing as e:
        return Verdict(outcome="inconclusive", reason=str(e))
    except Exception as e:
        return Verdict(
            outcome="failed",
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
