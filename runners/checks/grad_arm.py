"""One arm of a gradient comparison, run in its own process.

``python -m runners.checks.grad_arm SPEC.json ARM.json`` loads the workload
named in the spec, runs one forward+backward and saves the gradients
(``grads.pt``, CPU tensors by name) into the spec's ``out_dir``; ``ARM.json``
says how it went (status, GPU UUID, starting reserved bytes, measured
increment). A workload failure is written as a status, with exit code 0. A spec
with ``phase = "forward_nograd"`` runs one no-grad forward instead (in evaluation
mode, `runners.protocol.SupportsModes`) and saves its declared outputs
(``outputs.pt``): the 24-view regression's base arms. Every arm's step starts from
the same random state (the spec's seed).

A spec with ``reference`` runs the workload in a reference precision
(``reference_dtype``, or the default for the workload's dtype;
`runners.checks.precision`): through the workload's ``dtype`` keyword, else by
upcasting the modules it holds (`runners.adapt.upcast`, confirmed on the arm's
outputs and gradients); a workload that cannot is status ``unsupported``.
Where the workload declares its routing, the forward's top-k selections are
saved too (``routing.pt``). A spec with ``replay_routing`` (another arm's
``routing.pt``) feeds those selections to the routers of a workload that can
take them (`runners.protocol.ReplaysRouting`).

A reference arm whose step fails on the workload's own kernels (transformers'
experts on ``torch._grouped_mm`` have no float64 kernel) runs it once more on an
equivalent path the library offers (`runners.adapt.equivalent`), recorded as
``precision_route_equivalent``; failing there too, the arm's status says why, and
the comparison is inconclusive, never failed.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from runners.adapt.held import modules_held
from runners.adapt.routers import RouterHooks, find_routers, holds_experts
from runners.adapt.upcast import ReferenceArm, setup_reference
from runners.checks import noise, precision
from runners.checks.context import dtype_name, phase_step, seeded
from runners.checks.execute import start_harness
from runners.harness import child
from runners.harness.oom import StepOutcome, capture
from runners.harness.probe import CudaProbe
from runners.harness.steps import measure_step
from runners.protocol import (
    DeclaresRouterMargins,
    DeclaresRouting,
    ForwardOutputs,
    PrecisionUnsupported,
    ReplaysRouting,
    Shape,
    Workload,
)
from runners.workloads import prebuilt
from runners.workloads.loader import WorkloadLoadError, load_workload


def run_arm(spec: dict[str, Any]) -> dict[str, Any]:
    """Run the arm described by ``spec``; return what goes into ARM.json."""
    device = torch.device(spec["device"])
    info: dict[str, Any] = {"arm": spec["arm"], "pid": os.getpid(), "device": str(device)}
    if device.type == "cuda":
        torch.cuda.set_device(device)
    seed = int(spec["seed"])
    probe, info["determinism"] = start_harness(device, seed=seed, warn_only=bool(spec["warn_only"]))
    info["gpu_uuid"] = probe.uuid if isinstance(probe, CudaProbe) else "cpu"
    start = probe.sample()
    info["reserved_at_start_bytes"] = start.reserved_bytes
    info["allocated_at_start_bytes"] = start.allocated_bytes
    t0 = time.perf_counter_ns()

    def finish(status: str, **extra: Any) -> dict[str, Any]:
        info.update(status=status, duration_ns=time.perf_counter_ns() - t0, **extra)
        return info

    try:
        w = load_workload(Path(spec["root"]), spec["ref"], spec["params"])
    except WorkloadLoadError as e:
        return finish("load-error", error=f"workload load: {e}")
    info.update(workload=w.name, workload_digest=w.digest(), dtype=dtype_name(w.dtype))
    compute, declined = _compute_dtype(spec, info)
    if declined is not None:
        return finish(declined[0], error=declined[1])
    if isinstance(w, DeclaresRouting):
        w.declare_routing(True)
    outs: list[ForwardOutputs] = []
    shape = Shape(batch=int(spec["batch"]), seq=int(spec["seq"]))
    # On CPU the tracker's dispatch mode would import torch._dynamo (seconds per arm)
    # for a figure the comparison does not use; CUDA's counters cost nothing.
    session = probe.session() if isinstance(probe, CudaProbe) else contextlib.nullcontext()
    arm: ReferenceArm | None = None
    with session:
        cap = capture("setup", lambda: _setup(w, device, seed, compute), device=device)
        if not cap.outcome.ok:
            return finish(cap.outcome.status, error=cap.outcome.sentence())
        if isinstance(cap.value, str):
            return finish("unsupported", error=cap.value)
        arm = cap.value
        info["reserved_after_setup_bytes"] = probe.sample().reserved_bytes
        info["setup_routes"] = prebuilt.routes()
        hooks = router_hooks(w, info)
        replaying = replay(w, spec.get("replay_routing"), device, info, hooks)
        batch_cap = capture("make_batch", lambda: w.make_batch(shape, seed))
        if not batch_cap.outcome.ok:
            return finish(batch_cap.outcome.status, error=batch_cap.outcome.sentence())
        assert batch_cap.value is not None
        batch = batch_cap.value if arm is None else arm.batch(batch_cap.value)
        grad = spec.get("phase", "forward_backward") == "forward_backward"
        step = seeded(phase_step(w, batch, grad=grad), seed, device)
        info["forward_seed"] = seed
        outcome = _stepped(probe, w, arm, hooks, step, device, info, outs)
        if not outcome.ok:
            return finish(outcome.status, error=outcome.sentence())
        if not grad:
            return _outputs_saved(w, arm, hooks, replaying, outs, spec, device, info, finish)
        grads_cap = capture("gradients", w.gradients, device=device)
        if not grads_cap.outcome.ok or grads_cap.value is None:
            return finish(grads_cap.outcome.status, error=grads_cap.outcome.sentence())
        if arm is not None:
            try:
                arm.confirm(outs[0] if outs else None, grads_cap.value)
            except PrecisionUnsupported as e:
                info.update(arm.measurements())
                return finish("unsupported", error=str(e))
            info.update(arm.measurements())
        grads = {k: v.detach().to("cpu") for k, v in grads_cap.value.items()}
    torch.save(grads, Path(spec["out_dir"]) / "grads.pt")
    routing = routing_of(w, hooks, replaying, outs, info)
    if routing:
        torch.save(routing, Path(spec["out_dir"]) / "routing.pt")
    outs.clear()
    capture("teardown", w.teardown, device=device)
    return finish("ok", tensors=len(grads), routed_layers=len(routing))


def _outputs_saved(
    w: Workload,
    arm: ReferenceArm | None,
    hooks: RouterHooks | None,
    replaying: bool,
    outs: list[ForwardOutputs],
    spec: dict[str, Any],
    device: torch.device,
    info: dict[str, Any],
    finish: Callable[..., dict[str, Any]],
) -> dict[str, Any]:
    """A no-grad arm (``phase = forward_nograd``): its declared outputs saved on the CPU
    (``outputs.pt``), and its routing (``routing.pt``); the reference arm's precision
    confirmed on those outputs."""
    out = outs[0] if outs else None
    if arm is not None:
        try:
            arm.confirm(out)
        except PrecisionUnsupported as e:
            info.update(arm.measurements())
            return finish("unsupported", error=str(e))
        info.update(arm.measurements())
    saved = {} if out is None else {k: v.to("cpu") for k, v in out.declared().items()}
    torch.save(saved, Path(spec["out_dir"]) / "outputs.pt")
    routing = routing_of(w, hooks, replaying, outs, info)
    if routing:
        torch.save(routing, Path(spec["out_dir"]) / "routing.pt")
    margins = margins_of(w, hooks)
    if margins:
        # One float per token and routed layer: how near each selection was to flipping.
        torch.save(margins, Path(spec["out_dir"]) / "margins.pt")
    outs.clear()
    capture("teardown", w.teardown, device=device)
    return finish("ok", outputs=len(saved), routed_layers=len(routing))


def _compute_dtype(
    spec: dict[str, Any], info: dict[str, Any]
) -> tuple[torch.dtype | None, tuple[str, str] | None]:
    """The dtype the arm computes in (None: the workload's own; the reference arm's,
    said in ``info["dtype"]``), or why this arm does not run (its status, the error)."""
    if spec.get("low_precision_only") and not noise.low_precision(info["dtype"]):
        return None, ("skipped", f"a {info['dtype']} workload: wanted for 16-bit only")
    if spec.get("reference"):
        ref = precision.reference_dtype_for(info["dtype"], spec.get("reference_dtype"))
        if not precision.higher(ref, info["dtype"]):
            return None, ("unsupported", f"{ref} is no higher than the workload's {info['dtype']}")
        info["dtype"] = ref
        return getattr(torch, ref), None
    return None, None


def _stepped(
    probe: object,
    w: Workload,
    arm: ReferenceArm | None,
    hooks: RouterHooks | None,
    step: Callable[[], ForwardOutputs],
    device: torch.device,
    info: dict[str, Any],
    outs: list[ForwardOutputs],
) -> StepOutcome:
    """The arm's forward+backward. The reference is the harness's request: a kernel
    without its dtype is tried once more on the library's equivalent path
    (`runners.adapt.equivalent`)."""
    outcome = _forward_backward(probe, step, device, info, outs)
    if not outcome.ok and arm is not None and arm.try_equivalent(w, outcome.sentence()):
        outs.clear()
        if hooks is not None:  # what the failed step saw is not the arm's
            hooks.take()
            hooks.replayed = 0
        zeroed = capture("zero_grad", w.zero_grad, device=device)
        if zeroed.outcome.ok:
            outcome = _forward_backward(probe, step, device, info, outs)
        info.update(arm.measurements())
    return outcome


def routing_of(
    w: Workload,
    hooks: RouterHooks | None,
    replaying: bool,
    outs: list[ForwardOutputs],
    info: dict[str, Any],
) -> dict[str, torch.Tensor]:
    """What the routers chose in the step (seen by the harness's hooks, else as the
    workload declared it), on the CPU; whether a saved routing was replayed is said
    in ``info``."""
    if replaying and hooks is not None:
        info["routing_replayed_layers"] = hooks.replayed
        if hooks.broken:
            info["routing_replay"] = (
                f"the harness could not replay {len(hooks.broken)} router(s) (first: "
                f"{hooks.broken[0]}): their weights are not a softmax over the top k"
            )
    elif replaying:
        assert isinstance(w, ReplaysRouting)
        info["routing_replayed_layers"] = w.replayed_layers()
    declared = outs[0].routing if outs else {}
    seen = hooks.take() if hooks is not None else declared
    routing = {k: v.detach().to("cpu") for k, v in seen.items()}
    if hooks is not None:
        hooks.detach()
    return routing


def margins_of(w: object, hooks: RouterHooks | None) -> dict[str, torch.Tensor]:
    """The routers' per-token margins in the step (`runners.adapt.routers.margin`): seen
    by the harness's hooks, else as the workload offers them (`DeclaresRouterMargins`);
    empty where neither."""
    if hooks is not None:
        return hooks.take_margins()
    if isinstance(w, DeclaresRouterMargins):
        return {k: v.detach().to("cpu", torch.float32) for k, v in w.router_margins().items()}
    return {}


def _forward_backward(
    probe: object,
    step: Callable[[], ForwardOutputs],
    device: torch.device,
    info: dict[str, Any],
    outs: list[ForwardOutputs],
) -> StepOutcome:
    """One forward+backward (a no-grad arm's forward: the step says which): measured on
    CUDA, captured on CPU; its outputs kept."""
    if isinstance(probe, CudaProbe):
        rec = measure_step(probe, "forward_backward", step, keep=outs.append)
        info.update(rec.measurements("forward_backward_"))
        return rec.outcome
    fb = capture("forward_backward", step, device=device)
    if fb.value is not None:
        outs.append(fb.value)
    return fb.outcome


def _setup(
    w: Workload, device: torch.device, seed: int, compute: torch.dtype | None
) -> ReferenceArm | str | None:
    """Set up in the configured dtype (None), or in ``compute``: the reference arm, or
    why the workload cannot compute there."""
    if compute is None:
        prebuilt.setup(w, device, seed)
        return None
    try:
        return setup_reference(w, device, seed, compute)
    except PrecisionUnsupported as e:
        return str(e)


def router_hooks(w: object, info: dict[str, Any]) -> RouterHooks | None:
    """For a workload that declares no routing: hooks on the routers the harness finds in
    the modules it holds (`runners.adapt.routers`); ``info["routing_route"]`` says which
    route the arm's routing came by (``workload``, ``harness-hooks`` or ``none``)."""
    if isinstance(w, DeclaresRouting):
        info["routing_route"] = "workload"
        return None
    held = modules_held(w)
    routers = find_routers(held)
    if not routers:
        info["routing_route"] = "none"
        if holds_experts(held):
            info["routing_unseen"] = "a mixture of experts whose routers the harness does not know"
        return None
    info["routing_route"] = "harness-hooks"
    info["routers_found"] = len(routers)
    hooks = RouterHooks(routers)
    hooks.recording = True
    return hooks


def replay(
    w: object,
    path: str | None,
    device: torch.device,
    info: dict[str, Any],
    hooks: RouterHooks | None = None,
) -> bool:
    """Feed the routers the selections saved at ``path`` (another arm's routing.pt):
    through the workload (`ReplaysRouting`), else through the harness's router hooks;
    ``info["routing_replay"]`` says whether they were: ``replayed``, or why not."""
    if not path:
        return False
    if not isinstance(w, ReplaysRouting) and hooks is None:
        info["routing_replay"] = "the workload cannot replay routing"
        return False
    if not Path(path).is_file():
        info["routing_replay"] = "the reference arm saved no routing"
        return False
    given = torch.load(path, map_location=device, weights_only=True)
    if isinstance(w, ReplaysRouting):
        w.replay_routing(given)
        info["routing_replay_route"] = "workload"
    else:
        assert hooks is not None
        hooks.replay(given)
        info["routing_replay_route"] = "harness-hooks"
    info["routing_replay"] = "replayed"
    info["routing_replay_layers_given"] = len(given)
    return True


if __name__ == "__main__":
    sys.exit(child.serve(run_arm))
