"""The environment a command runs in, read without importing torch.

`attest` and `ledger run` must stay fast and work where torch is absent, so
versions come from installed-distribution metadata (`importlib.metadata`),
the driver from /proc, and the GPUs from NVML (pynvml, when installed and a
driver answers), never from importing torch or runners (whose fingerprint
module imports torch at module import). The scope facets are the same ones
`qualify`'s runners record.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import platform
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Environment", "fingerprint", "gpu_used_bytes", "host_environment"]

_DRIVER = Path("/proc/driver/nvidia/version")

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


def host_environment() -> Environment:
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


def _driver() -> str | None:
    try:
        text = _DRIVER.read_text()
    except OSError:
        return None
    # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  ..."
    for word in text.split():
        if word[:1].isdigit() and word.count(".") >= 1:
            return word
    return None


def fingerprint() -> dict[str, str]:
    """What `attest` records of the interpreter: python, packages digest, and
    torch / CUDA / NCCL / driver where present."""
    out = {"python": platform.python_version(), "packages_digest": packages_digest()}
    found = {
        "torch": _version("torch"),
        "cuda": _version("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11"),
        "nccl": _nccl(),
        "driver": _driver() or NONE,
    }
    out.update({k: v for k, v in found.items() if v != NONE})
    return out
