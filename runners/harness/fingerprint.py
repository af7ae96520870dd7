"""Environment fingerprint: the scope facets a result is valid at."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import platform
import socket
from dataclasses import dataclass

import torch

from runners.harness import nvml

NONE = "none"
"""Facet value where a component does not exist in this environment (CPU runs)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Fingerprint:
    device_kind: str
    gpu_model: str
    gpu_count: int
    gpu_memory_bytes: int
    driver: str
    cuda: str
    torch: str
    nccl: str
    python: str
    packages_digest: str
    """sha256 hex over the sorted 'name==version' lines of installed distributions."""
    gpu_uuids: tuple[str, ...]
    """UUIDs of the visible GPUs, device index order."""
    host: str

    def scope(self) -> dict[str, str | int]:
        """The flat scope facets (UUIDs and host are runner facts, not scope)."""
        return {
            "device_kind": self.device_kind,
            "gpu_model": self.gpu_model,
            "gpu_count": self.gpu_count,
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "driver": self.driver,
            "cuda": self.cuda,
            "torch": self.torch,
            "nccl": self.nccl,
            "python": self.python,
            "packages_digest": self.packages_digest,
        }


@functools.cache
def packages_digest() -> str:
    """Read once per process (a fork server reads it for every claim it forks: the
    installed distributions do not change while a run lasts)."""
    lines = sorted(
        {
            f"{(d.metadata['Name'] or '').lower()}=={d.version}"
            for d in importlib.metadata.distributions()
        }
    )
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def nccl_version() -> str:
    if not torch.cuda.is_available():
        return NONE
    try:
        ver = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
    except Exception:
        return NONE
    parts = ver if isinstance(ver, tuple) else (ver,)
    return ".".join(str(p) for p in parts)


def gpu_uuids() -> tuple[str, ...]:
    if not torch.cuda.is_available():
        return ()
    return tuple(
        nvml.normalise_uuid(str(torch.cuda.get_device_properties(i).uuid))
        for i in range(torch.cuda.device_count())
    )


def fingerprint(device: torch.device) -> Fingerprint:
    """Fingerprint this process's environment for work on ``device``."""
    common = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "packages_digest": packages_digest(),
        "host": socket.gethostname(),
    }
    if device.type == "cuda":
        index = torch.cuda.current_device() if device.index is None else device.index
        props = torch.cuda.get_device_properties(index)
        return Fingerprint(
            device_kind="cuda",
            gpu_model=str(props.name),
            gpu_count=torch.cuda.device_count(),
            gpu_memory_bytes=int(props.total_memory),
            driver=nvml.driver_version() or "unknown",
            cuda=str(torch.version.cuda or "unknown"),
            nccl=nccl_version(),
            gpu_uuids=gpu_uuids(),
            **common,
        )
    return Fingerprint(
        device_kind="cpu",
        gpu_model=NONE,
        gpu_count=0,
        gpu_memory_bytes=0,
        driver=NONE,
        cuda=str(torch.version.cuda or NONE),
        nccl=NONE,
        gpu_uuids=(),
        **common,
    )
