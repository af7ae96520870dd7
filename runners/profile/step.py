"""One step under the attributing tracker: what `ledger profile` prints.

Loads a workload, sets it up, optionally runs one unmeasured step first
(``warm``), then runs the phase once under `AttributingTracker` and reports
the peak increment with its attribution beside the workload's own estimate
for the same shape and phase (told cold or warm as the step was), asked after the
step (the ready adapters' built-in estimator calibrates by running steps: its
point and calibration are reported beside the bound). A workload without an
estimator (one raising `EstimatorMissing`) is profiled all the same, its report
saying why nothing was predicted: profiling is how one starts writing one. On CUDA the
allocator's view comes too: allocated and reserved before, at the peak and
after, and the device memory outside the pool (driver used less reserved).
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import torch

from runners.checks.context import phase_step
from runners.contract.result import Json
from runners.harness.attribution import AttributingTracker, module_names
from runners.protocol import (
    EstimatorMissing,
    MemoryEstimate,
    Phase,
    Shape,
    Workload,
    estimate_of,
)
from runners.workloads.loader import load_workload


def _allocator(device: torch.device) -> dict[str, Json]:
    if device.type != "cuda":
        return {"kind": "cpu (no caching allocator: the tracker's live storage bytes)"}
    free, total = torch.cuda.mem_get_info(device)
    s = torch.cuda.memory_stats(device)
    reserved = int(s.get("reserved_bytes.all.current", 0))
    return {
        "allocated_bytes": int(s.get("allocated_bytes.all.current", 0)),
        "allocated_peak_bytes": int(s.get("allocated_bytes.all.peak", 0)),
        "reserved_bytes": reserved,
        "reserved_peak_bytes": int(s.get("reserved_bytes.all.peak", 0)),
        "outside_pool_bytes": int(total - free) - reserved,
    }


def _depth(name: str, depth: int | None) -> str:
    if depth is None:
        return name
    return ".".join(name.split(".")[:depth])


class ProfileError(Exception):
    """The step cannot be profiled as asked (one-line reason)."""


def _estimate(
    w: Workload, shape: Shape, phase: Phase, *, cold: bool
) -> tuple[MemoryEstimate | None, str | None]:
    """The workload's estimate, or None with why where it has no estimator yet."""
    try:
        return estimate_of(w, shape, phase, cold=cold), None
    except EstimatorMissing as e:
        return None, str(e)


def profile_step(
    *,
    root: Path,
    ref: str,
    params: dict[str, Any],
    shape: Shape,
    phase: Phase,
    device: str = "cpu",
    seed: int = 0,
    warm: bool = False,
    top: int = 10,
    depth: int | None = None,
) -> dict[str, Json]:
    """Profile one ``phase`` step at ``shape``; a JSON-able report (module docstring)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ProfileError("--device cuda: no CUDA device is present")
        # "cuda" names no device; the memory APIs below need an index.
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(dev)
    w = load_workload(root, ref, params)
    w.setup(dev, seed)
    grad = phase == "forward_backward"
    if warm:
        out = phase_step(w, w.make_batch(shape, seed), grad=grad)()
        del out
        if grad:
            w.zero_grad()
    batch = w.make_batch(shape, seed)
    step = phase_step(w, batch, grad=grad)
    gc.collect()
    before = _allocator(dev)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
    tracker = AttributingTracker(module_names(w))
    with tracker.watching():
        out = step()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    at_peak = _allocator(dev)
    att = tracker.attribute(keep=max(top, 50))
    del out, step, batch
    gc.collect()
    after = _allocator(dev)
    by_module: dict[str, int] = {}
    for name, n in att.by_module.items():
        key = _depth(name, depth)
        by_module[key] = by_module.get(key, 0) + n
    att.by_module = by_module
    report = att.to_json(top)
    measured = att.peak_bytes
    if dev.type == "cuda":
        measured = torch.cuda.max_memory_allocated(dev) - base
        report["allocator"] = {"before": before, "at_end_of_step": at_peak, "after": after}
    # Asked after the measured step: an estimator that calibrates by running steps
    # (the ready adapters' built-in one) would otherwise warm the step it explains.
    estimate, missing = _estimate(w, shape, phase, cold=not warm)
    w.teardown()
    return {
        "workload": w.name,
        "shape": str(shape),
        "phase": phase,
        "device": str(dev),
        "cold": not warm,
        "measured_increment_bytes": measured,
        "predicted_bytes": None if estimate is None else estimate.predicted_bytes,
        "measured_over_predicted": measured / estimate.predicted_bytes
        if estimate is not None and estimate.predicted_bytes
        else None,
        "estimate_terms": {} if estimate is None else {k: v for k, v in estimate.terms.items()},
        "point_bytes": None if estimate is None else estimate.point_bytes,
        "calibration": None if estimate is None else estimate.calibration,
        "no_estimator": missing,
        "attribution": report,
    }
