"""regression-24view's reference arm: the base's forward run again in a reference
precision (the library's equivalent path tried where a kernel lacks the dtype), the
outputs' errors against it recorded; where it cannot compute, why and what would fix
it, and only what needs the reference is left undecided.
"""

from __future__ import annotations

import torch

from runners.adapt.upcast import ReferenceArm, try_setup_reference
from runners.checks import precision, routing
from runners.checks.context import (
    Session,
    WorkloadFailed,
    dtype_name,
    load_preserving,
    phase_step,
    seeded,
)
from runners.checks.execute import capture_where
from runners.checks.outputs import rel_err
from runners.contract.result import Json
from runners.protocol import (
    Batch,
    DeclaresRouting,
    ForwardOutputs,
    PrecisionUnsupported,
    Shape,
    Workload,
)


def reference(
    sess: Session,
    w: Workload,
    batch: Batch,
    shape: Shape,
    reference_dtype: str | None,
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
    ref_dtype = precision.reference_dtype_for(low, reference_dtype)
    m["reference_dtype"] = ref_dtype
    base_routes: dict[str, torch.Tensor] = {}
    if isinstance(w, DeclaresRouting):
        w.declare_routing(True)
        routed = seeded(phase_step(w, batch, grad=False), sess.seed, sess.device)
        got: ForwardOutputs = sess.call("forward (routing)", routed)
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
    step = seeded(phase_step(ref_w, ref_batch, grad=False), sess.seed, sess.device)
    try:
        out: ForwardOutputs = sess.call("forward (reference)", step)
    except WorkloadFailed as e:
        if not arm.try_equivalent(ref_w, e.outcome.sentence()):
            raise
        assert arm.equivalent is not None
        m.update(arm.measurements())
        sess.progress(f"reference forward again on {arm.equivalent.sentence()}")
        out = sess.call("forward (reference, equivalent)", step)
    return out, arm


def _cannot_compute(ref_dtype: str, what: str) -> str:
    """Why the reference was not computed, and what would compute it."""
    return (
        f"the reference precision {ref_dtype} could not be computed by {what}; what would "
        f"fix it: a setup(device, seed, *, dtype) that builds the model on kernels that "
        f'compute in {ref_dtype} (runners.protocol, Precision), or rule = "threshold" '
        "(judges without a reference)"
    )
