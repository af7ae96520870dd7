"""The environment a command ran in, read without importing torch.

`ledger run` wraps any command, and the ledger core must stay light, so the
versions come from installed-distribution metadata and the GPUs from NVML
(pynvml, when installed and a driver answers). The scope facets are the same
ones `qualify`'s runners record.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import platform
import socket
from dataclasses import dataclass
from typing import Any

__all__ = ["Environment", "environment", "gpu_used_bytes"]

NONE = "none"


@dataclass(frozen=True, slots=True)
class Environment:
    scope: dict[str, str | int]
    gpu_uuids: list[str]
    host: str


def _version(*names: str) -> str:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return NONE


def _nccl() -> str:
    """The NCCL wheel's version (torch's CUDA builds ship NCCL as a distribution)."""
    for d in importlib.metadata.distributions():
        name = (d.metadata["Name"] or "").lower()
        if name.startswith("nvidia-nccl"):
            return d.version
    return NONE


def packages_digest() -> str:
    lines = sorted(
        {
            f"{(d.metadata['Name'] or '').lower()}=={d.version}"
            for d in importlib.metadata.distributions()
        }
    )
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _nvml() -> Any | None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        # No package, no driver, or no GPU: the run is recorded as a CPU run.
        return None
    return pynvml


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def gpu_used_bytes() -> dict[str, int] | None:
    """Device memory in use per GPU UUID, or None where NVML is not available."""
    nv = _nvml()
    if nv is None:
        return None
    out: dict[str, int] = {}
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        out[_text(nv.nvmlDeviceGetUUID(h))] = int(nv.nvmlDeviceGetMemoryInfo(h).used)
    return out


def environment() -> Environment:
    """GPU model and UUIDs, driver, CUDA, torch, NCCL, Python and a digest of every
    installed distribution."""
    scope: dict[str, str | int] = {
        "device_kind": "cpu",
        "gpu_model": NONE,
        "gpu_count": 0,
        "gpu_memory_bytes": 0,
        "driver": NONE,
        "cuda": NONE,
        "torch": _version("torch"),
        "nccl": _nccl(),
        "python": platform.python_version(),
        "packages_digest": packages_digest(),
    }
    uuids: list[str] = []
    nv = _nvml()
    if nv is not None and nv.nvmlDeviceGetCount() > 0:
        h = nv.nvmlDeviceGetHandleByIndex(0)
        cuda = int(nv.nvmlSystemGetCudaDriverVersion())
        scope.update(
            {
                "device_kind": "cuda",
                "gpu_model": _text(nv.nvmlDeviceGetName(h)),
                "gpu_count": int(nv.nvmlDeviceGetCount()),
                "gpu_memory_bytes": int(nv.nvmlDeviceGetMemoryInfo(h).total),
                "driver": _text(nv.nvmlSystemGetDriverVersion()),
                "cuda": f"{cuda // 1000}.{cuda % 1000 // 10}",
            }
        )
        for i in range(nv.nvmlDeviceGetCount()):
            uuids.append(_text(nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i))))
    return Environment(scope=scope, gpu_uuids=uuids, host=socket.gethostname())
