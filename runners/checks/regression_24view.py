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

from dataclasses import dataclass
from functools import partial
from typing import Literal

import torch

from runners.adapt.upcast import ReferenceArm, try_setup_reference
from runners.checks import noise, precision, routing
from runners.checks.context import (
    CheckContext,
    Session,
    Verdict,
    WorkloadFailed,
    dtype_name,
    load_preserving,
    phase_step,
)
from runners.checks.execute import capture_where, execute
from runners.checks.outputs import bitwise_equal, host_copy, rel_err, sha256_of
from runners.checks.params import CheckParams
from runners.claim.names import REGRESSION_24VIEW
from runners.claim.result import CheckResult, Json
from runners.harness.steps import measure_step
from runners.protocol import (
    Batch,
    DeclaresRouting,
    EstimatorMissing,
    ForwardOutputs,
    PrecisionUnsupported,
    Shape,
    SupportsChunkedNLL,
    Workload,
)

NAME = REGRESSION_24VIEW
VERSION = "3"


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
    """Seed of every generator and of the workload's inputs."""


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
    w = sess.load()
    rtol = noise.threshold_for(dtype_name(w.dtype), p.nll_rtol, p.nll_rtol_fp32, p.nll_rtol_bf16)
    batch = sess.call("make_batch", lambda: w.make_batch(shape, sess.seed))
    m: dict[str, Json] = {
        "rule": p.rule,
        "views": views,
        "seq": seq,
        "chunk_tokens": chunk,
        "nll_rtol": rtol,
    }
    try:
        decision = sess.admit(w, shape, "forward_nograd", sess.probe.available_bytes())
        m.update({f"admission_{k}": v for k, v in decision.measurements().items()})
    except WorkloadFailed as e:
        # The decision is recorded, not enforced: without an estimator, say so and go on.
        if e.outcome.error_type != EstimatorMissing.__name__:
            raise
        m["admission_skipped"] = e.outcome.message
    outs: list[ForwardOutputs] = []
    keep = outs.append

    for i, run_name in enumerate(("cold", "warm")):
        sess.progress(f"24-view forward {i + 1}/2 ({run_name})")
        rec = measure_step(
            sess.probe,
            f"forward_nograd {shape} run {i + 1}",
            phase_step(w, batch, grad=False),
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
    problems, base_outputs = _repeats(outs[0], outs[1], atol, m)
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
        chunked_t = sess.call("nll_chunked", lambda: w.nll_chunked(batch, chunk))
    ref: ForwardOutputs | None = None
    ref_problem = ""
    if p.rule == "reference":
        ref, ref_problem = _reference(sess, w, batch, shape, p, m, base_outputs)
    state: noise.FamilyState = "passed"
    if chunked_t is not None and first is not None and second is not None:
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
    if problems:
        return Verdict(outcome="failed", reason="; ".join(problems), measurements=m)
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


def _reference(
    sess: Session,
    w: Workload,
    batch: Batch,
    shape: Shape,
    p: Params,
    m: dict[str, Json],
    base: dict[str, torch.Tensor],
) -> tuple[ForwardOutputs | None, str]:
    """The base's forward in the reference precision (and, when the workload declares its
    routing, one more unmeasured forward of the base to count routing differences); the
    outputs' errors against it recorded. Returns the outputs, or None and why not.

    The reference is the harness's request, not the code's own step: where it cannot
    compute (a kernel without the reference dtype, after the library's equivalent path
    was tried; the harness's own error), only what needs it is left undecided."""
    ctx = sess.ctx
    low = dtype_name(w.dtype)
    ref_dtype = precision.reference_dtype_for(low, p.reference_dtype)
    m["reference_dtype"] = ref_dtype
    base_routes: dict[str, torch.Tensor] = {}
    if isinstance(w, DeclaresRouting):
        w.declare_routing(True)
        got: ForwardOutputs = sess.call("forward (routing)", lambda: w.forward(batch, grad=False))
        base_routes = {k: v.to("cpu") for k, v in got.routing.items()}
        w.declare_routing(False)
        del got
    if not precision.higher(ref_dtype, low):
        why = f"the reference {ref_dtype} is no higher than the workload's {low}"
        m["reference_skipped"] = why
        return None, why
    sess.close()  # the base's memory goes before the reference's is taken
    ref_w = load_preserving(ctx.repo_root, ctx.workload_ref, dict(ctx.workload_params))
    sess.workload = ref_w  # torn down with the session
    sess.progress(f"24-view forward in the reference precision {ref_dtype}")
    try:
        computed = _reference_forward(sess, ref_w, shape, ref_dtype, m)
    except WorkloadFailed as e:
        # Whatever the class of error (an import, an OOM): the code's own step ran above.
        computed = _cannot_compute(
            ref_dtype, f"the workload in {ref_dtype}: {e.outcome.sentence()}"
        )
    except Exception as e:
        # The harness's own fault: it accuses nothing, and decides nothing that needs it.
        where = capture_where(e)
        computed = _cannot_compute(ref_dtype, f"the harness: {type(e).__name__}: {e}{where}")
    if isinstance(computed, str):
        m["reference_skipped"] = computed
        return None, computed
    out, ref_arm = computed
    try:
        ref_arm.confirm(out)
    except PrecisionUnsupported as e:
        m.update(ref_arm.measurements())
        m["reference_skipped"] = str(e)
        return None, str(e)
    m.update(ref_arm.measurements())
    refs = out.declared()
    m["outputs_against_reference"] = [
        {"name": name, "err_base": rel_err(base[name], refs[name])}
        for name in sorted(set(base) & set(refs))
    ]
    if base_routes and out.routing:
        routes = {k: v.to("cpu") for k, v in out.routing.items()}
        m["routing"] = {"base_vs_reference": routing.differing(base_routes, routes)}
    return out, ""


def _reference_forward(
    sess: Session, ref_w: Workload, shape: Shape, ref_dtype: str, m: dict[str, Json]
) -> tuple[ForwardOutputs, ReferenceArm] | str:
    """Set ``ref_w`` up in ``ref_dtype`` and run the forward on the batch of the check's
    own `Shape` (never read back from the batch: its keys are the workload's own). A
    forward that fails on the workload's path is tried once more on an equivalent path
    the library offers (`ReferenceArm.try_equivalent`); its figures are recorded."""
    arm: ReferenceArm | str = sess.call(
        "setup (reference)",
        lambda: try_setup_reference(ref_w, sess.device, sess.seed, getattr(torch, ref_dtype)),
    )
    if isinstance(arm, str):
        return arm
    if isinstance(ref_w, DeclaresRouting):
        ref_w.declare_routing(True)
    made: Batch = sess.call("make_batch (reference)", lambda: ref_w.make_batch(shape, sess.seed))
    ref_batch = arm.batch(made)
    try:
        out: ForwardOutputs = sess.call(
            "forward (reference)", lambda: ref_w.forward(ref_batch, grad=False)
        )
    except WorkloadFailed as e:
        if not arm.try_equivalent(ref_w, e.outcome.sentence()):
            raise
        assert arm.equivalent is not None
        m.update(arm.measurements())
        sess.progress(f"reference forward again on {arm.equivalent.sentence()}")
        out = sess.call(
            "forward (reference, equivalent)", lambda: ref_w.forward(ref_batch, grad=False)
        )
    return out, arm


def _cannot_compute(ref_dtype: str, what: str) -> str:
    """Why the reference was not computed, and what would compute it."""
    return (
        f"the reference precision {ref_dtype} could not be computed by {what}; what would "
        f"fix it: a setup(device, seed, *, dtype) that builds the model on kernels that "
        f'compute in {ref_dtype} (runners.protocol, Precision), or rule = "threshold" '
        "(judges without a reference)"
    )


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
