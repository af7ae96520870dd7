"""The GPUs of this host as exclusive slots: `--gpus all|0,1,...`.

A claim takes ``world_size`` devices to itself (memory evidence needs the
device alone) and sees only those, through ``CUDA_VISIBLE_DEVICES``. Where no
GPU is visible the indices name logical devices (CPU slots), so the same
scheduling runs, and is tested, on a CPU host. Read without torch (NVML). A GPU
itself, and what NVML says of it, are `ledger.hardware.gpus`'s (the fleet names
devices too); the slots and the pool are this module's.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from ledger.evidence.errors import UsageError
from ledger.hardware.gpus import Device, gpu_model, visible_gpus

__all__ = ["Device", "DevicePool", "gpu_model", "parse_gpus", "visible_gpus"]


def parse_gpus(text: str, gpus: Sequence[Device] | None = None) -> list[Device]:
    """``all`` (every visible GPU; one logical device where there is none) or a comma
    list of indices (logical devices where no GPU is visible). `UsageError` for an
    index that is not there or repeated."""
    seen = visible_gpus() if gpus is None else list(gpus)
    text = text.strip()
    if text == "all":
        return seen or [Device("0")]
    try:
        wanted = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--gpus {text!r}: want 'all' or indices such as 0,1,3") from None
    if not wanted or any(i < 0 for i in wanted) or len(set(wanted)) != len(wanted):
        raise UsageError(f"--gpus {text!r}: want 'all' or distinct indices such as 0,1,3")
    if not seen:
        return [Device(str(i)) for i in wanted]
    by_index = {d.index: d for d in seen}
    missing = [str(i) for i in wanted if str(i) not in by_index]
    if missing:
        raise UsageError(
            f"--gpus {text}: no GPU {', '.join(missing)} on this host "
            f"(visible: {', '.join(by_index)})"
        )
    return [by_index[str(i)] for i in wanted]


class DevicePool:
    """Devices handed out whole (never two claims on one), or, to claims that may share
    one (`ledger.execution.sharing`), to at most ``share`` such claims at once."""

    def __init__(self, devices: Sequence[Device], share: int = 1) -> None:
        self.devices = list(devices)
        self.share = max(1, share)
        self._free = list(devices)
        self._shared: dict[str, int] = {}
        """Claims on each device handed out shared."""
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return len(self.devices)

    def take(self, n: int, *, shared: bool = False) -> list[Device] | None:
        """``n`` free devices (lowest indices first), or None when fewer are free. A
        ``shared`` claim of one device takes a free one first, else joins the least
        shared device that has room."""
        with self._lock:
            if shared and n == 1 and self.share > 1:
                if self._free:
                    got = self._free.pop(0)
                    self._shared[got.index] = 1
                    return [got]
                room = [d for d in self.devices if 0 < self._shared.get(d.index, 0) < self.share]
                if not room:
                    return None
                got = min(room, key=lambda d: self._shared[d.index])
                self._shared[got.index] += 1
                return [got]
            if n > len(self._free):
                return None
            taken, self._free = self._free[:n], self._free[n:]
            return taken

    def give_back(self, devices: Sequence[Device]) -> None:
        with self._lock:
            for d in devices:
                left = self._shared.get(d.index, 0) - 1
                if left > 0:
                    self._shared[d.index] = left
                    continue
                self._shared.pop(d.index, None)
                self._free.append(d)
            order = {d.index: i for i, d in enumerate(self.devices)}
            self._free.sort(key=lambda d: order[d.index])
