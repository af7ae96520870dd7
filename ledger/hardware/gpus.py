"""The GPUs of this host: `Device` (a CUDA index with NVML's UUID, or a logical
slot where no GPU is visible), the GPUs NVML sees, and a GPU's model name."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Device", "gpu_model", "visible_gpus"]


@dataclass(frozen=True, slots=True)
class Device:
    index: str
    """The CUDA index (or the logical slot on a CPU host)."""
    uuid: str | None = None
    """NVML's UUID; None for a logical device."""

    @property
    def label(self) -> str:
        return f"gpu {self.index}" if self.uuid else f"slot {self.index}"


def visible_gpus() -> list[Device]:
    """Every GPU NVML sees, by index, with its UUID; empty without NVML or GPUs."""
    try:
        import pynvml

        pynvml.nvmlInit()
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
            out.append(Device(str(i), uuid.decode() if isinstance(uuid, bytes) else str(uuid)))
        return out
    except Exception:
        # No package, no driver, no GPU: logical devices only.
        return []


def gpu_model(device: Device) -> str:
    """NVML's name of the GPU (``NVIDIA H200``); empty for a logical device."""
    if device.uuid is None:
        return ""
    try:
        import pynvml

        name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByUUID(device.uuid))
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:
        return ""
