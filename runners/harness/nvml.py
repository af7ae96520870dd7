"""NVML access (pynvml from nvidia-ml-py): imported lazily, absence tolerated.

Every function returns None where NVML, the device or the process is not
visible (no driver, no package, a container whose pid namespace hides us).
"""

from __future__ import annotations

import threading
from typing import Any

from runners.harness.hostpid import nvml_pids

_lock = threading.Lock()
_state: dict[str, Any] = {}


def _nvml() -> Any | None:
    """The initialised pynvml module, or None."""
    with _lock:
        if "module" in _state:
            return _state["module"]
        mod: Any | None
        try:
            import pynvml

            pynvml.nvmlInit()
            mod = pynvml
        except Exception:
            # No package, no driver, or no GPU: callers fall back to torch's view.
            mod = None
        _state["module"] = mod
        return mod


def normalise_uuid(uuid: str) -> str:
    """NVML spells UUIDs ``GPU-xxxxxxxx-...``; torch prints them without the prefix."""
    text = uuid.strip()
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def driver_version() -> str | None:
    nv = _nvml()
    if nv is None:
        return None
    try:
        ver = nv.nvmlSystemGetDriverVersion()
    except Exception:
        return None
    return ver.decode() if isinstance(ver, bytes) else str(ver)


def _handle(uuid: str) -> Any | None:
    nv = _nvml()
    if nv is None:
        return None
    try:
        return nv.nvmlDeviceGetHandleByUUID(normalise_uuid(uuid))
    except Exception:
        return None


def process_used_bytes(uuid: str, pid: int | None = None) -> int | None:
    """GPU memory NVML attributes to ``pid`` (default: this process) on the device."""
    h = _handle(uuid)
    nv = _nvml()
    if h is None or nv is None:
        return None
    wanted = nvml_pids() if pid is None else (pid,)
    if not wanted:
        return None  # inside the sandbox without its host pid: unavailable
    try:
        procs = list(nv.nvmlDeviceGetComputeRunningProcesses(h))
    except Exception:
        return None
    by_pid = {int(p.pid): p for p in procs}
    for want in wanted:
        if want in by_pid:
            used = getattr(by_pid[want], "usedGpuMemory", None)
            # NVML reports None (NVML_VALUE_NOT_AVAILABLE) under some virtualisation.
            return None if used is None else int(used)
    return None


def devices_used() -> tuple[dict[str, int], set[int]] | None:
    """Device-wide used bytes per GPU UUID, and the pids holding GPU memory.

    Read from a process without a CUDA context of its own, it shows another
    process's memory and then its absence.
    """
    nv = _nvml()
    if nv is None:
        return None
    used: dict[str, int] = {}
    pids: set[int] = set()
    try:
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            uuid = nv.nvmlDeviceGetUUID(h)
            used[uuid.decode() if isinstance(uuid, bytes) else str(uuid)] = int(
                nv.nvmlDeviceGetMemoryInfo(h).used
            )
            pids.update(int(p.pid) for p in nv.nvmlDeviceGetComputeRunningProcesses(h))
    except Exception:
        return None
    return used, pids


def pids_used() -> dict[int, int] | None:
    """GPU memory NVML attributes to each process, summed over the devices (pids as
    this process sees them); None without NVML."""
    nv = _nvml()
    if nv is None:
        return None
    out: dict[int, int] = {}
    try:
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            for p in nv.nvmlDeviceGetComputeRunningProcesses(h):
                used = getattr(p, "usedGpuMemory", None)
                if used is not None:
                    out[int(p.pid)] = out.get(int(p.pid), 0) + int(used)
    except Exception:
        return None
    return out


def devices() -> list[tuple[str, str, int]] | None:
    """(UUID, model name, total memory in bytes) of each device, in NVML's index order,
    as the parent reads them without a CUDA context; None without NVML."""
    nv = _nvml()
    if nv is None:
        return None
    out: list[tuple[str, str, int]] = []
    try:
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            uuid, name = nv.nvmlDeviceGetUUID(h), nv.nvmlDeviceGetName(h)
            out.append(
                (
                    uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                    name.decode() if isinstance(name, bytes) else str(name),
                    int(nv.nvmlDeviceGetMemoryInfo(h).total),
                )
            )
    except Exception:
        return None
    return out
