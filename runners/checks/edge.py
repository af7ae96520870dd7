"""The edge of admission: the least free memory at which a workload admits a step,
and ballast that brings free memory down to just above it, so that admission's
check runs each admitted step where a prediction short of the truth shows.
"""

from __future__ import annotations

import torch

from runners.checks.context import Session
from runners.harness.probe import MiB
from runners.harness.registry import Owned
from runners.protocol import AdmissionDecision, Phase, Shape, Workload, admit_of

CUDA_EDGE_MARGIN = 2 * MiB
"""On CUDA, room left above the least admitting free memory (allocation granularity)."""
_MAX_EDGE_TRIES = 4


def min_admitting_free(
    w: Workload, shape: Shape, phase: Phase, *, cold: bool = False
) -> int | None:
    """The least ``free_bytes`` at which ``w.admit`` admits (admission is monotone in
    free memory), or None if it admits at no size up to 2**60."""
    hi = 1 << 20
    while not admit_of(w, shape, phase, hi, cold=cold).admitted:
        hi *= 2
        if hi > 1 << 60:
            return None
    lo = 0
    while lo < hi:
        mid = (lo + hi) // 2
        if admit_of(w, shape, phase, mid, cold=cold).admitted:
            hi = mid
        else:
            lo = mid + 1
    return lo


def to_edge(
    sess: Session, w: Workload, shape: Shape, phase: Phase, available0: int, margin: int
) -> tuple[AdmissionDecision, Owned | None, int, bool]:
    """Allocate ballast so the available memory sits just above the least admitting
    free. Returns the decision at the memory then available, the ballast (owned; None
    when the edge was not reached), the tries, and whether the edge was reached."""
    probe = sess.probe
    cold = sess.cold(phase)
    least = sess.call(
        f"edge search {phase} {shape}", lambda: min_admitting_free(w, shape, phase, cold=cold)
    )
    floor = CUDA_EDGE_MARGIN if probe.device.type == "cuda" else 4096
    step = margin
    tries = 0
    if available0 <= int(least) + margin:
        # Already at the edge: no ballast needed.
        here = sess.admit(w, shape, phase, available0)
        return here, None, 0, True
    for tries in range(1, _MAX_EDGE_TRIES + 1):
        size = available0 - (int(least) + step)
        if size <= 0:
            break
        try:
            tensor = _allocate(size, probe.device)
        except torch.OutOfMemoryError:
            # The driver would not hand out all it reported free: leave more room.
            step = max(4 * step, 32 * floor)
            continue
        ballast = sess.registry.own_tensor("ballast", tensor, name=f"ballast-{phase}-{shape}")
        del tensor
        decision: AdmissionDecision = sess.admit(w, shape, phase, probe.available_bytes())
        if decision.admitted:
            return decision, ballast, tries, True
        sess.registry.release_now(ballast)
        # Allocation granularity took more than the margin: leave more room.
        step = max(2 * step, floor)
    probe.release_cached()
    decision = sess.admit(w, shape, phase, probe.available_bytes())
    return decision, None, tries, False


def _allocate(nbytes: int, device: torch.device) -> torch.Tensor:
    # Deterministic mode fills fresh tensors; ballast is never read, so skip the fill
    # (on CPU its pages then stay virtual; on CUDA the block is held all the same).
    flag = torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]
    torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
    try:
        return torch.empty(nbytes, dtype=torch.uint8, device=device)
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = flag  # type: ignore[attr-defined]
