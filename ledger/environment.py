"""The environment fingerprint of the running interpreter, for `attest`.

Read without importing torch: `attest` must stay fast and must work where
torch is absent, so versions come from installed distribution metadata
(`importlib.metadata`) and the driver from /proc, never from importing torch
or runners (whose fingerprint module imports torch at module import).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import platform
from pathlib import Path

__all__ = ["environment"]

_DRIVER = Path("/proc/driver/nvidia/version")


def _version(*dists: str) -> str | None:
    for d in dists:
        try:
            return importlib.metadata.version(d)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _packages_digest() -> str:
    lines = sorted(
        {
            f"{(d.metadata['Name'] or '').lower()}=={d.version}"
            for d in importlib.metadata.distributions()
        }
    )
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


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


def environment() -> dict[str, str]:
    """python, packages digest, and torch / CUDA / NCCL / driver where present."""
    out = {"python": platform.python_version(), "packages_digest": _packages_digest()}
    found = {
        "torch": _version("torch"),
        "cuda": _version("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11"),
        "nccl": _version("nvidia-nccl-cu12", "nvidia-nccl-cu11"),
        "driver": _driver(),
    }
    out.update({k: v for k, v in found.items() if v})
    return out
