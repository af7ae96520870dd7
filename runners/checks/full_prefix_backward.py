"""Full-prefix backward: replay a retained prefix, then measure the target backward.

The prefix is ``prefix_backwards`` forward+backward steps accumulating
gradients, then (``optimizer_step``) one optimizer update and `zero_grad`.
The target step (forward+backward at ``batch`` x ``seq``) is then admitted at
the memory available and, if admitted, run in a reset-to-peak window. Its
increment is reported against the prediction and the usable budget: passed iff
no OOM and measured <= predicted (a prediction of 0 bytes or less, with no ratio to
judge, is inconclusive). A refused target is ``refused`` (with
``run_if_refused`` it is run anyway and its increment recorded).

On CPU the budget is the host's MemAvailable unless ``budget_bytes`` is given
(then simulated, as in the admission check).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from runners.checks.context import CheckContext, Session, Verdict, phase_step
from runners.checks.execute import execute
from runners.checks.params import CheckParams
from runners.contract.names import FULL_PREFIX_BACKWARD
from runners.contract.result import CheckResult, Json
from runners.harness.probe import CpuProbe
from runners.harness.steps import StepRecord, measure_step
from runners.protocol import AdmissionDecision, Shape, Workload

NAME = FULL_PREFIX_BACKWARD
VERSION = "1"


@dataclass(kw_only=True, slots=True, frozen=True)
class Params(CheckParams):
    batch: int = 4
    """Sequences in the target step."""
    seq: int = 64
    """Tokens per sequence of the target step."""
    prefix_backwards: int = 3
    """Forward+backward steps of the prefix, accumulating gradients."""
    prefix_batch: int | None = None
    """Sequences in each prefix step. None: the target's."""
    prefix_seq: int | None = None
    """Tokens per sequence of each prefix step. None: the target's."""
    optimizer_step: bool = True
    """End the prefix with one optimizer update."""
    run_if_refused: bool = False
    """Run a refused target anyway and record its increment (the outcome stays refused)."""
    budget_bytes: int | None = None
    """CPU only: a simulated device size. None: the host's MemAvailable."""
    seed: int = 0
    """Seed of every generator and of the workload's inputs."""


def run(ctx: CheckContext, p: Params, recorded: dict[str, Json]) -> list[CheckResult]:
    r = execute(
        ctx,
        check=NAME,
        version=VERSION,
        params=p,
        recorded=recorded,
        body=partial(_body, p=p),
        seed=p.seed,
        budget_bytes=p.budget_bytes if ctx.device.type == "cpu" else None,
    )
    return [r]


def _body(sess: Session, p: Params) -> Verdict:
    target = Shape(batch=p.batch, seq=p.seq)
    prefix = Shape(
        batch=target.batch if p.prefix_batch is None else p.prefix_batch,
        seq=target.seq if p.prefix_seq is None else p.prefix_seq,
    )
    w = sess.load()
    probe = sess.probe
    m: dict[str, Json] = {"target_shape": str(target), "prefix_shape": str(prefix)}
    if isinstance(probe, CpuProbe):
        m["memory_simulated"] = probe.budget_bytes is not None
    failed = _prefix(sess, w, p, prefix, m)
    if failed is not None:
        return _failed(*failed, m)
    sess.call("zero_grad", w.zero_grad)

    batch = sess.call("make_batch target", partial(w.make_batch, target, sess.seed))
    target_step = phase_step(w, batch, grad=True)
    del batch
    probe.release_cached()
    available = probe.available_bytes()
    decision = sess.admit(w, target, "forward_backward", available)
    estimate = sess.estimate(w, target, "forward_backward")
    m.update(
        {
            "target_available_bytes": available,
            "target_admitted": decision.admitted,
            "target_predicted_bytes": decision.predicted_bytes,
            "target_usable_bytes": decision.usable_bytes,
            "target_reserve_bytes": decision.reserve_bytes,
            "target_suggestion": decision.suggestion,
            "target_estimate_terms": {k: v for k, v in estimate.terms.items()},
        }
    )
    # An estimator that states its error: its point beside the bound, and its fit.
    if estimate.point_bytes is not None:
        m["target_point_bytes"] = estimate.point_bytes
    if estimate.calibration is not None:
        m["target_calibration"] = estimate.calibration
    if not decision.admitted and not p.run_if_refused:
        return Verdict(
            outcome="refused",
            reason=(
                f"target forward_backward {target} refused after the prefix: predicted "
                f"{decision.predicted_bytes} > usable {decision.usable_bytes}"
            ),
            measurements=m,
        )

    sess.progress(f"target backward {target}")
    rec = measure_step(probe, "target forward_backward", target_step)
    del target_step
    m.update(rec.measurements("target_"))
    measured = rec.increment_bytes
    m["target_measured_bytes"] = measured
    m["target_headroom_bytes"] = decision.usable_bytes - measured
    m["target_measured_over_predicted"] = (
        round(measured / decision.predicted_bytes, 6) if decision.predicted_bytes else None
    )
    return _judged(rec, decision, m)


def _prefix(
    sess: Session, w: Workload, p: Params, prefix: Shape, m: dict[str, Json]
) -> tuple[str, str] | None:
    """The prefix: its backward steps (and the optimizer step), measured into ``m``;
    the first that did not end ok, as (its sentence, its status), or None."""
    n = p.prefix_backwards
    for i in range(n):
        sess.progress(f"prefix backward {i + 1}/{n}")
        batch = sess.call("make_batch prefix", partial(w.make_batch, prefix, sess.seed + 1 + i))
        step = phase_step(w, batch, grad=True)
        del batch
        rec = measure_step(sess.probe, f"prefix forward_backward {i + 1}", step)
        sess.ran("forward_backward")
        del step
        m.update(rec.measurements(f"prefix{i + 1}_"))
        if not rec.ok:
            return f"prefix backward {i + 1}: {rec.outcome.sentence()}", rec.outcome.status
    if p.optimizer_step:
        sess.progress("prefix optimizer step")
        rec = measure_step(sess.probe, "optimizer_step", w.optimizer_step)
        m.update(rec.measurements("optimizer_step_"))
        if not rec.ok:
            return f"optimizer step: {rec.outcome.sentence()}", rec.outcome.status
    return None


def _failed(sentence: str, status: str, m: dict[str, Json]) -> Verdict:
    return Verdict(
        # An import the step could not make judged nothing (the harness cannot say whose).
        outcome="inconclusive" if status == "infra-error" else "failed",
        reason=sentence,
        measurements=m,
    )


def _judged(rec: StepRecord, decision: AdmissionDecision, m: dict[str, Json]) -> Verdict:
    """The target step judged: refused yet run, out of memory after admission, or
    measured above its prediction fail it; within, it passes."""
    measured = rec.increment_bytes
    if not decision.admitted:
        return Verdict(
            outcome="refused",
            reason=(
                f"target refused (predicted {decision.predicted_bytes} > usable "
                f"{decision.usable_bytes}); run anyway: {rec.outcome.status}, measured "
                f"{measured}"
            ),
            measurements=m,
        )
    if rec.outcome.status == "oom":
        return Verdict(
            outcome="failed",
            reason=f"target admitted (predicted {decision.predicted_bytes} <= usable "
            f"{decision.usable_bytes}) but ran out of memory: {rec.outcome.sentence()}",
            measurements=m,
        )
    if not rec.ok:
        return _failed(f"target: {rec.outcome.sentence()}", rec.outcome.status, m)
    if measured > decision.predicted_bytes:
        return Verdict(
            outcome="failed",
            reason=f"target measured increment {measured} > predicted "
            f"{decision.predicted_bytes} (usable {decision.usable_bytes})",
            measurements=m,
        )
    if decision.predicted_bytes <= 0:
        # No ratio: it held only because nothing was measured above 0 bytes.
        return Verdict(
            outcome="inconclusive",
            reason=f"target admitted on a prediction of {decision.predicted_bytes} bytes, "
            f"measured {measured}: no measured/predicted ratio, so the estimate's tightness "
            "cannot be judged; an estimate must predict a positive size",
            measurements=m,
        )
    return Verdict(outcome="passed", reason=None, measurements=m)
