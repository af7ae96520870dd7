"""What a claim process reports about its own memory peak (``process_peak_bytes``).

CUDA: the allocator pool's high-water mark over the whole process (the checks
reset the peak before each measured step, so every reset first folds the peak so
far in here) plus what the process holds outside the pool at the end (context,
NCCL buffers) as NVML shows it. CPU: the kernel's resident high-water mark
(``ru_maxrss``). The parent bounds this report from outside (`outside`).
"""

from __future__ import annotations

import resource
from typing import Any

_high = [0]


def install() -> None:
    """Keep the pool's peak across the checks' resets (CUDA only; no-op elsewhere)."""
    import torch

    if getattr(torch.cuda.reset_peak_memory_stats, "_ledger_kept", False):
        return
    reset = torch.cuda.reset_peak_memory_stats

    def kept(device: Any = None) -> None:
        if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            _high[0] = max(_high[0], int(torch.cuda.max_memory_reserved(device)))
        reset(device)

    kept._ledger_kept = True  # type: ignore[attr-defined]
    torch.cuda.reset_peak_memory_stats = kept


def peak_bytes() -> int:
    """This process's peak as it reports it (see the module's docstring)."""
    import torch

    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        from runners.harness import nvml

        pool = max(_high[0], int(torch.cuda.max_memory_reserved()))
        pids = _pids()
        listed = nvml.pids_used() or {}
        used = next((listed[p] for p in pids if p in listed), None)
        if used is None and pids and not _sandboxed():
            # NVML does not show this pid (a container): the device's used memory,
            # the process having the device to itself while the claim runs.
            free, total = torch.cuda.mem_get_info()
            used = total - free
        if used is None:
            # Inside the sandbox without its host pid, or NVML not showing it: the pool
            # alone; the parent's outside view (which knows the host pid) bounds it.
            return pool
        return pool + max(0, used - int(torch.cuda.memory_reserved()))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _pids() -> tuple[int, ...]:
    from runners.harness.hostpid import nvml_pids

    return nvml_pids()


def _sandboxed() -> bool:
    import os

    from runners.harness.hostpid import PID_NAMESPACE_VAR

    return bool(os.environ.get(PID_NAMESPACE_VAR))
