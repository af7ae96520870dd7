"""24-view no-grad regression: one unchunked forward over 24 views, twice.

Every output the workload declares (`ForwardOutputs.declared`: the loss, the
pooled hidden states, any named tensors such as logits) must repeat between
the two runs: max abs difference <= ``pooled_atol`` (0 demands bitwise
repetition, right on deterministic paths); each is recorded by digest. For a
workload offering `SupportsChunkedNLL`, the unchunked NLL must agree with the
chunked one, judged against the noise floor of the same run (the difference
between the two unchunked runs; `runners.checks.noise`): failed only above
both ``nll_rtol`` (per dtype by default) and the noise times ``noise_margin``,
inconclusive when the noise alone exceeds the threshold. Without chunked NLL
that part is skipped with the reason recorded. Both forwards are measured
(cold, then warm) and the workload's admission decision for the step is
recorded, not enforced.

With ``rule = "reference"`` (the default) the base runs once more in a reference
precision (`runners.checks.precision`): each declared output's error against it
is recorded (its precision floor), and the chunked NLL is judged as a candidate:
``err(chunked, ref) <= k * max(err(unchunked, ref), run-to-run noise) + atol``.
Where the workload declares its routing, the tokens routed differently between
the base and the reference are counted (an unmeasured forward). A workload
whose ``setup`` takes no ``dtype`` is upcast (`runners.adapt.upcast`, the route
recorded as ``precision_route``); one that cannot compute in the reference
precision either way leaves the NLL inconclusive, with the reason.
``rule = "threshold"`` keeps the fixed ``nll_rtol`` rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Literal, TypeVar

import torch

from runners.checks import noise, precision, regression_base
from runners.checks.context import (
    CheckContext,
    Session,
    Verdict,
    WorkloadFailed,
    dtype_name,
    entered,
    phase_step,
    seeded,
)
from runners.checks.execute import execute
from runners.checks.outputs import bitwise_equal, host_copy, sha256_of
from runners.checks.params import CheckParams
from runners.checks.regression_reference import reference
from runners.contract.names import REGRESSION_24VIEW
from runners.contract.result import CheckResult, Json
from runners.harness.steps import measure_step
from runners.protocol import (
    Batch,
    EstimatorMissing,
    ForwardOutputs,
    Shape,
    SupportsChunkedNLL,
    Workload,
)

_T = TypeVar("_T")

NAME = REGRESSION_24VIEW
VERSION = "4"


@dataclass(kw_only=True, slots=True, frozen=True)
class Params(CheckParams):
    views: int = 24
    """Sequences (views) in the one unchunked forward."""
    seq: int = 32
    """Tokens per view."""
    pooled_atol: float = 0.0
    """Allowed max abs difference of the pooled hidden states between the two runs
    (0: bitwise repetition)."""
    rule: Literal["reference", "threshold"] = "reference"
    """How the chunked NLL is judged: ``reference`` (against the unchunked NLL's own error
    relative to a reference-precision run) or ``threshold`` (``nll_rtol`` and the noise
    margin; the rule receipts without this parameter were judged by)."""
    k: float = 2.0
    """Reference rule: the chunked NLL's error may be this many times the floor."""
    atol: float = 1e-6
    """Reference rule: slack added to ``k * floor`` (relative units)."""
    reference_dtype: Literal["float32", "float64"] | None = None
    """Reference rule: the reference precision. None: float32 for a bfloat16 / float16
    workload, float64 for a float32 one."""
    nll_rtol: float | None = None
    """Threshold rule: allowed relative difference of the unchunked and the chunked NLL. None: the
    dtype's default (``nll_rtol_fp32`` / ``nll_rtol_bf16``)."""
    nll_rtol_fp32: float = 1e-5
    """Default for float32: a chunked sum reorders additions (~1e-7 relative)."""
    nll_rtol_bf16: float = 1e-2
    """Default for bfloat16 / float16 logits (the loss itself is accumulated in fp32)."""
    noise_margin: float = 2.0
    """The chunked NLL fails only above the run-to-run noise times this."""
    chunk_tokens: int | None = None
    """Tokens per chunk of the chunked NLL. None: a quarter of the step's tokens
    (at least 1)."""
    seed: int = 0
    """Seed of every generator and of the workload's inputs; every forward starts from
    this random state (recorded as ``forward_seed``)."""
    base_workload_params: dict[str, Json] = field(default_factory=dict)
    """Workload parameters of the base's arms: the claim's, updated by these. The base's
    arms load from the base revision's checkout."""
    base_workload_ref: str = ""
    """Workload entry point of the base's arms (``module:function``) where the base's plan
    names another than the head's; empty: the claim's."""
    arm_timeout_s: int = 600
    """Seconds the base's two arms together may take."""
    replay_base_routing: bool = True
    """Where the base's arm saw its routers choose: replay the base's routing in the head.
    False: the head is judged on its own routing, its near-tie flips set aside (as for a
    head that cannot replay)."""
    max_set_aside_share: float = 0.05
    """The most of the tokens that near-tie flips may set aside; above it a comparison
    that would pass is inconclusive."""


def run(ctx: CheckContext, p: Params, recorded: dict[str, Json]) -> list[CheckResult]:
    body = partial(_body, p=p)
    r = execute(
        ctx, check=NAME, version=VERSION, params=p, recorded=recorded, body=body, seed=p.seed
    )
    return [r]


def _body(sess: Session, p: Params) -> Verdict:
    views, seq, atol = p.views, p.seq, p.pooled_atol
    shape = Shape(batch=views, seq=seq)
    chunk = max(1, shape.tokens // 4) if p.chunk_tokens is None else p.chunk_tokens
    m: dict[str, Json] = {"forward_seed": sess.seed}
    no_base = regression_base.skipped(sess)
    # The base's arms first: the device holds one model at a time.
    arms = None if no_base else regression_base.base_arms(sess, p, m)
    if arms is not None:
        regression_base.arms_measured(arms, m)
    if no_base:
        m["base_comparison"] = f"skipped: {no_base}"
    w = sess.load()
    rtol = noise.threshold_for(dtype_name(w.dtype), p.nll_rtol, p.nll_rtol_fp32, p.nll_rtol_bf16)
    batch = sess.call("make_batch", lambda: w.make_batch(shape, sess.seed))
    m.update(rule=p.rule, views=views, seq=seq, chunk_tokens=chunk, nll_rtol=rtol)
    _admission(sess, w, shape, m)
    outs = _forward_twice(sess, w, batch, shape, m)
    if isinstance(outs, Verdict):
        return outs
    problems, head_outputs = _repeats(outs[0], outs[1], atol, m)
    first, second = outs[0].scalar_loss(), outs[1].scalar_loss()
    outs.clear()
    chunked_t: torch.Tensor | None = None
    if not isinstance(w, SupportsChunkedNLL):
        m["nll_chunked_skipped"] = (
            f"workload {w.name!r} offers no nll_chunked (runners.protocol.SupportsChunkedNLL)"
        )
    elif first is None or second is None:
        m["nll_chunked_skipped"] = "the forward returned neither nll nor loss"
    else:
        sess.progress("chunked NLL")
        chunked = _evaluated(sess, w, lambda: w.nll_chunked(batch, chunk))
        chunked_t = sess.call("nll_chunked", chunked)
    on_base = head_outputs
    if arms is not None:
        replayed = regression_base.head_on_base_routing(sess, w, batch, arms, p, m)
        on_base = head_outputs if replayed is None else replayed
    low = dtype_name(w.dtype)
    ref: ForwardOutputs | None = None
    ref_problem = ""
    if p.rule == "reference":
        ref, ref_problem = reference(sess, w, batch, shape, p.reference_dtype, m, head_outputs)
    state: noise.FamilyState = "passed"
    if chunked_t is not None and first is not None and second is not None:
        state = _nll_judged(first, second, chunked_t, ref, rtol, p, m, problems)
    against = None
    if arms is not None:
        sess.progress("24-view outputs of the head against the base's")
        against = regression_base.judged(on_base, ref, arms, low, p, m, sess.device)
    return _verdict(problems, state, ref_problem, rtol, p, m, against)


def _evaluated(sess: Session, w: Workload, fn: Callable[[], _T]) -> Callable[[], _T]:
    """``fn`` (a no-grad view beside the forwards) in evaluation mode, from the check's
    random state."""

    def again() -> _T:
        entered(w, grad=False)
        return fn()

    return seeded(again, sess.seed, sess.device)


def _admission(sess: Session, w: Workload, shape: Shape, m: dict[str, Json]) -> None:
    """The admission decision for the forward, recorded, not enforced: without an
    estimator, said so."""
    try:
        decision = sess.admit(w, shape, "forward_nograd", sess.probe.available_bytes())
        m.update({f"admission_{k}": v for k, v in decision.measurements().items()})
    except WorkloadFailed as e:
        # The decision is recorded, not enforced: without an estimator, say so and go on.
        if e.outcome.error_type != EstimatorMissing.__name__:
            raise
        m["admission_skipped"] = e.outcome.message


def _forward_twice(
    sess: Session, w: Workload, batch: Batch, shape: Shape, m: dict[str, Json]
) -> list[ForwardOutputs] | Verdict:
    """The same forward twice (cold, then warm), each in evaluation mode from the same
    random state, measured: their outputs, or the verdict where one did not end ok."""
    outs: list[ForwardOutputs] = []
    keep = outs.append
    for i, run_name in enumerate(("cold", "warm")):
        sess.progress(f"24-view forward {i + 1}/2 ({run_name})")
        rec = measure_step(
            sess.probe,
            f"forward_nograd {shape} run {i + 1}",
            seeded(phase_step(w, batch, grad=False), sess.seed, sess.device),
            keep=keep,
        )
        sess.ran("forward_nograd")
        m.update(rec.measurements(f"forward{i + 1}_{run_name}_"))
        if not rec.ok:
            # The claim process cannot tell an infrastructure error (its own code can
            # raise the same): a failure; the parent's device readings decide infra.
            return Verdict(
                outcome="failed",
                reason=f"forward run {i + 1}: {rec.outcome.sentence()}",
                measurements=m,
            )
    return outs


def _nll_judged(
    first: torch.Tensor,
    second: torch.Tensor,
    chunked_t: torch.Tensor,
    ref: ForwardOutputs | None,
    rtol: float,
    p: Params,
    m: dict[str, Json],
    problems: list[str],
) -> noise.FamilyState:
    """The chunked NLL judged by the plan's rule (against the unchunked runs and their
    noise, or against the reference arm); a failure said among ``problems``."""
    nll1, nll2 = float(first.double()), float(second.double())
    if p.rule == "threshold":
        state = _nll(nll1, nll2, chunked_t, rtol, p, m)
    else:
        ref_nll = None if ref is None else ref.scalar_loss()
        state = _nll_by_reference(nll1, nll2, chunked_t, ref_nll, p, m)
    if state == "failed" and p.rule == "reference":
        problems.append(
            f"NLL chunked {m['nll_chunked']!r}: err against the reference "
            f"{m['nll_err_chunked']!r} > {p.k} x floor {m['nll_floor']!r} "
            f"({m['nll_floor_from']}) + {p.atol}"
        )
    elif state == "failed":
        problems.append(
            f"NLL unchunked {m['nll_unchunked_run1']!r} vs chunked {m['nll_chunked']!r}: "
            f"rel diff {m['nll_rel_diff']!r} > {rtol!r} and > {p.noise_margin}x the "
            f"run-to-run noise {m['nll_noise_rel_diff']!r}"
        )
    return state


def _verdict(
    problems: list[str],
    state: noise.FamilyState,
    ref_problem: str,
    rtol: float,
    p: Params,
    m: dict[str, Json],
    against: Verdict | None = None,
) -> Verdict:
    """Any problem fails, a head beyond the rule against the base too; an NLL that
    could not be judged (no finite floor, or noise over the threshold), or a base
    comparison that could not, is inconclusive."""
    if against is not None and against.outcome == "failed":
        problems = [*problems, str(against.reason)]
    if problems:
        return Verdict(outcome="failed", reason="; ".join(problems), measurements=m)
    if against is not None:
        return against
    if state == "inconclusive" and p.rule == "reference":
        return Verdict(
            outcome="inconclusive",
            reason=f"the chunked NLL could not be judged: {ref_problem or 'no finite floor'}",
            measurements=m,
        )
    if state == "inconclusive":
        return Verdict(
            outcome="inconclusive",
            reason=f"NLL noise floor (run 1 vs run 2, rel {m['nll_noise_rel_diff']!r}) is over "
            f"the threshold {rtol!r}: the chunked NLL cannot be told apart from noise",
            measurements=m,
        )
    return Verdict(outcome="passed", reason=None, measurements=m)


def _repeats(
    a: ForwardOutputs, b: ForwardOutputs, atol: float, m: dict[str, Json]
) -> tuple[list[str], dict[str, torch.Tensor]]:
    """Compare every declared output of two runs; record per-output rows; the problems,
    and the first run's outputs on the host (the base the reference is compared with)."""
    da, db = a.declared(), b.declared()
    rows: list[dict[str, Json]] = []
    problems: list[str] = []
    base = {name: host_copy(t) for name, t in da.items()}
    for name in sorted(set(da) | set(db)):
        if name not in da or name not in db:
            problems.append(f"output {name!r} declared by one run only")
            continue
        x, y = da[name].float(), db[name].float()
        if x.shape != y.shape:
            problems.append(
                f"{name} shapes differ between runs: {tuple(x.shape)} vs {tuple(y.shape)}"
            )
            continue
        diff = (x - y).abs()
        row: dict[str, Json] = {
            "name": name,
            "elements": int(diff.numel()),
            "max_abs_diff": float(diff.max().item()) if diff.numel() else 0.0,
            "elements_differing": int((diff > 0).sum().item()),
            "nonfinite": int((~torch.isfinite(x)).sum().item()),
            "sha256_run1": (d1 := sha256_of(base[name])),
            # The same bytes have the same digest: only a run that differs is read again.
            "sha256_run2": d1
            if bitwise_equal(da[name], db[name])
            else sha256_of(host_copy(db[name])),
        }
        rows.append(row)
        max_abs = row["max_abs_diff"]
        assert isinstance(max_abs, float)
        if not max_abs <= atol:  # also catches NaN
            problems.append(
                f"{name} did not repeat: max abs diff {max_abs!r} > {atol!r} "
                f"({row['elements_differing']} of {row['elements']} elements differ)"
            )
        if name == "pooled_hidden":
            # The names receipts have always carried for the pooled hidden states.
            m["pooled_max_abs_diff"] = max_abs
            m["pooled_elements_differing"] = row["elements_differing"]
            m["pooled_elements"] = row["elements"]
            m["pooled_sha256_run1"] = row["sha256_run1"]
            m["pooled_sha256_run2"] = row["sha256_run2"]
            m["pooled_nonfinite"] = row["nonfinite"]
    m["outputs"] = rows  # type: ignore[assignment]
    return problems, base


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(a) if a != 0 else abs(a - b)


def _nll(
    nll: float, nll2: float, chunked_t: torch.Tensor, rtol: float, p: Params, m: dict[str, Json]
) -> noise.FamilyState:
    chunked = float(chunked_t.double().item())
    rel, floor = _rel(nll, chunked), _rel(nll, nll2)
    state = noise.judge(floor, rel if rel == rel else None, rtol, p.noise_margin)
    m.update(
        {
            "nll_unchunked_run1": nll,
            "nll_unchunked_run2": nll2,
            "nll_chunked": chunked,
            "nll_rel_diff": rel,
            "nll_noise_rel_diff": floor,
            "families": [
                {
                    "family": "nll",
                    "tensors": 1,
                    "noise_floor": floor,
                    "difference": rel,
                    "state": state,
                }
            ],
        }
    )
    return state


def _nll_by_reference(
    nll: float,
    nll2: float,
    chunked_t: torch.Tensor,
    ref: torch.Tensor | None,
    p: Params,
    m: dict[str, Json],
) -> noise.FamilyState:
    """The chunked NLL judged as a candidate against the reference NLL."""
    chunked = float(chunked_t.double().item())
    noise_rel = _rel(nll, nll2)
    m.update(nll_unchunked_run1=nll, nll_unchunked_run2=nll2, nll_chunked=chunked)
    m["nll_rel_diff"] = _rel(nll, chunked)
    m["nll_noise_rel_diff"] = noise_rel
    if ref is None:
        return "inconclusive"
    r = float(ref.double().item())
    v = precision.TensorVerdict("nll", _rel(r, chunked), _rel(r, nll), noise_rel, p.k, p.atol)
    m.update(
        {
            "nll_reference": r,
            "nll_err_chunked": v.err_candidate,
            "nll_err_unchunked": v.err_base,
            "nll_floor": v.floor,
            "nll_floor_from": v.floor_from,
            "nll_multiple": v.multiple,
            "families": [
                {
                    "family": "nll",
                    "tensors": 1,
                    "worst": "nll",
                    "err_candidate": v.err_candidate,
                    "err_base": v.err_base,
                    "noise": noise_rel,
                    "floor_from": v.floor_from,
                    "multiple": v.multiple,
                    "allowed": v.allowed,
                    "state": v.state,
                }
            ],
        }
    )
    return v.state
