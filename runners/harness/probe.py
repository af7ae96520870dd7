"""Memory probes: samples, reset-to-peak increments, the available budget.

`CudaProbe` reads the caching allocator (`torch.cuda.memory_stats`), the driver
(`torch.cuda.mem_get_info`) and NVML. `CpuProbe` counts live tensor storages
with `LiveStorageTracker`, and simulates free memory from a byte budget when
one is given (host RAM is not the constraint a CPU run qualifies).

GiB is 1024**3 bytes; every figure here is an exact int of bytes or ns.
"""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch

from runners.contract.result import Json
from runners.harness import nvml
from runners.harness.collect import collect
from runners.harness.tracker import LiveStorageTracker

GiB = 1024**3
MiB = 1024**2
DeviceKind = Literal["cuda", "cpu"]


@dataclass(kw_only=True, slots=True, frozen=True)
class MemorySample:
    """Memory state at one instant."""

    device_kind: DeviceKind
    time_ns: int
    """`time.perf_counter_ns` at the sample."""
    allocated_bytes: int
    """CUDA: allocator's allocated bytes; CPU: tracked live storage bytes."""
    reserved_bytes: int
    """CUDA: allocator's reserved (pool) bytes; CPU: equal to allocated (no pool)."""
    free_bytes: int
    """CUDA: driver free bytes; CPU: budget less allocated (or host MemAvailable)."""
    total_bytes: int
    """CUDA: device capacity; CPU: the budget (or host MemTotal)."""
    available_bytes: int
    """What a step could still allocate: free plus pool bytes cached but unallocated."""
    outside_pool_bytes: int | None
    """CUDA: (total - free) - reserved, device-wide (other processes included)."""
    process_used_bytes: int | None
    """NVML's per-process used bytes on this device, where visible."""
    process_outside_pool_bytes: int | None
    """NVML per-process used less reserved: this process's memory outside the pool."""
    num_ooms: int

    def measurements(self, prefix: str) -> dict[str, Json]:
        """Flat ``{prefix}{field}`` entries (device_kind and time left out)."""
        d = asdict(self)
        d.pop("device_kind")
        d.pop("time_ns")
        return {f"{prefix}{k}": v for k, v in d.items()}


@dataclass(kw_only=True, slots=True, frozen=True)
class PeakIncrement:
    """A reset-to-peak window: `increment_bytes` = peak allocated - allocated at reset.

    A conditional measured interval: it says nothing about memory before the
    reset or outside the allocator.
    """

    allocated_at_reset_bytes: int
    peak_allocated_bytes: int
    increment_bytes: int
    allocated_after_bytes: int
    reserved_at_reset_bytes: int
    peak_reserved_bytes: int
    peak_active_bytes: int
    num_ooms: int
    """OOMs the allocator counted during the window."""
    duration_ns: int

    def measurements(self, prefix: str) -> dict[str, Json]:
        return {f"{prefix}{k}": v for k, v in asdict(self).items()}


class PeakWindow:
    """Filled in when a `MemoryProbe.window` closes, also when the body raised."""

    def __init__(self) -> None:
        self.result: PeakIncrement | None = None

    @property
    def increment(self) -> PeakIncrement:
        if self.result is None:
            raise RuntimeError("peak window read before it closed")
        return self.result


class MemoryProbe(ABC):
    """Common interface of the CUDA and CPU probes."""

    device: torch.device
    device_kind: DeviceKind
    name: str
    """Recorded as measurement ``probe``."""

    @abstractmethod
    def sample(self) -> MemorySample: ...

    @abstractmethod
    def _reset(self) -> tuple[int, int]:
        """Reset peaks; return (allocated, reserved) at the reset."""

    @abstractmethod
    def _peaks(self) -> tuple[int, int, int, int, int]:
        """(peak allocated, allocated now, peak reserved, peak active, num_ooms)."""

    @abstractmethod
    def session(self) -> contextlib.AbstractContextManager[None]:
        """Context in which the probe sees the workload (CPU: tracker active)."""

    def synchronize(self) -> None:  # noqa: B027 - CPU work is synchronous: nothing to wait for
        """Wait for queued device work so peaks are final."""

    def available_bytes(self) -> int:
        return self.sample().available_bytes

    def release_cached(self, *, final: bool = False) -> None:
        """Return cached pool memory (``final``: also collect reference cycles and
        library workspaces kept for the process), before budget decisions and
        cleanup proofs."""
        if final:
            collect(final=True)

    def _at_reset_final(self, at_reset: int) -> int:
        """The level the window's increment is measured from, read at its end."""
        return at_reset

    @contextlib.contextmanager
    def window(self) -> Iterator[PeakWindow]:
        """Measure the reset-to-peak increment of the body."""
        w = PeakWindow()
        self.synchronize()
        ooms0 = self._peaks()[4]
        alloc0, reserved0 = self._reset()
        t0 = time.perf_counter_ns()
        try:
            yield w
        finally:
            # An OOM leaves a sticky error only for real faults; syncing after it is safe.
            with contextlib.suppress(Exception):
                self.synchronize()
            t1 = time.perf_counter_ns()
            peak, now, peak_res, peak_act, ooms = self._peaks()
            at_reset = self._at_reset_final(alloc0)
            w.result = PeakIncrement(
                allocated_at_reset_bytes=at_reset,
                peak_allocated_bytes=peak,
                increment_bytes=peak - at_reset,
                allocated_after_bytes=now,
                reserved_at_reset_bytes=reserved0 + (at_reset - alloc0),
                peak_reserved_bytes=peak_res,
                peak_active_bytes=peak_act,
                num_ooms=ooms - ooms0,
                duration_ns=t1 - t0,
            )


class CudaProbe(MemoryProbe):
    """Caching-allocator, driver and NVML view of one CUDA device."""

    name = "cuda-caching-allocator"
    device_kind: DeviceKind = "cuda"

    def __init__(self, device: torch.device) -> None:
        if device.type != "cuda":
            raise ValueError(f"CudaProbe needs a cuda device, got {device}")
        self.device = torch.device(
            "cuda", torch.cuda.current_device() if device.index is None else device.index
        )
        torch.cuda.init()  # type: ignore[no-untyped-call]
        props = torch.cuda.get_device_properties(self.device)
        self.uuid = nvml.normalise_uuid(str(props.uuid))

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def release_cached(self, *, final: bool = False) -> None:
        collect(final=final)
        torch.cuda.synchronize(self.device)
        if final:
            # cuBLAS keeps its per-handle workspace allocated in the pool for the process;
            # only a final release returns it (a workload's cold estimate prices it).
            clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
            if clear is not None:
                clear()
        torch.cuda.empty_cache()

    def _stats(self) -> dict[str, int]:
        # The raw nested counters: `torch.cuda.memory_stats` flattens and sorts a few
        # hundred entries in Python on every read, which was most of the harness's
        # per-step cost with the observer off (three reads per measured step).
        raw = getattr(torch._C, "_cuda_memoryStats", None)
        if raw is None:
            return {k: int(v) for k, v in torch.cuda.memory_stats(self.device).items()}
        return flat_stats(raw(self.device.index))

    def sample(self) -> MemorySample:
        s = self._stats()
        free, total = (int(x) for x in torch.cuda.mem_get_info(self.device))
        allocated = s.get("allocated_bytes.all.current", 0)
        reserved = s.get("reserved_bytes.all.current", 0)
        proc = nvml.process_used_bytes(self.uuid)
        return MemorySample(
            device_kind="cuda",
            time_ns=time.perf_counter_ns(),
            allocated_bytes=allocated,
            reserved_bytes=reserved,
            free_bytes=free,
            total_bytes=total,
            available_bytes=free + (reserved - allocated),
            outside_pool_bytes=(total - free) - reserved,
            process_used_bytes=proc,
            process_outside_pool_bytes=None if proc is None else proc - reserved,
            num_ooms=s.get("num_ooms", 0),
        )

    def _reset(self) -> tuple[int, int]:
        torch.cuda.reset_peak_memory_stats(self.device)
        s = self._stats()
        return s.get("allocated_bytes.all.current", 0), s.get("reserved_bytes.all.current", 0)

    def _peaks(self) -> tuple[int, int, int, int, int]:
        s = self._stats()
        return (
            s.get("allocated_bytes.all.peak", 0),
            s.get("allocated_bytes.all.current", 0),
            s.get("reserved_bytes.all.peak", 0),
            s.get("active_bytes.all.peak", 0),
            s.get("num_ooms", 0),
        )

    def memory_stats(self) -> dict[str, int]:
        """The allocator's counters most useful after an OOM."""
        s = self._stats()
        keys = (
            "allocated_bytes.all.current",
            "allocated_bytes.all.peak",
            "reserved_bytes.all.current",
            "reserved_bytes.all.peak",
            "active_bytes.all.current",
            "active_bytes.all.peak",
            "inactive_split_bytes.all.current",
            "num_ooms",
            "num_alloc_retries",
        )
        return {k: s.get(k, 0) for k in keys}

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        yield


_STAT_KEYS = ("allocated_bytes", "reserved_bytes", "active_bytes", "inactive_split_bytes")


def flat_stats(nested: dict[str, Any]) -> dict[str, int]:
    """The few ``memory_stats`` keys the probe reads, from the allocator's nested counters
    (``{"allocated_bytes": {"all": {"current": n, "peak": n, ...}}, "num_ooms": n}``)."""
    out: dict[str, int] = {}
    for key in _STAT_KEYS:
        per = nested.get(key, {}).get("all", {})
        for sub in ("current", "peak"):
            out[f"{key}.all.{sub}"] = int(per.get(sub, 0))
    for key in ("num_ooms", "num_alloc_retries"):
        out[key] = int(nested.get(key, 0))
    return out


def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if parts:
                    out[key] = int(parts[0]) * (1024 if parts[-1] == "kB" else 1)
    except OSError:
        pass
    return out


class CpuProbe(MemoryProbe):
    """Tracked live CPU storage bytes, against a simulated budget or host RAM."""

    name = "cpu-dispatch-tracker"
    device_kind: DeviceKind = "cpu"

    def __init__(self, *, budget_bytes: int | None = None) -> None:
        self.device = torch.device("cpu")
        self.tracker = LiveStorageTracker()
        self.budget_bytes = budget_bytes
        """Simulated device size; None means host MemTotal / MemAvailable."""
        self._ooms = 0
        self._active = 0

    @property
    def budget_source(self) -> str:
        return "simulated-budget" if self.budget_bytes is not None else "host-meminfo"

    def note_oom(self) -> None:
        """Count an OOM (simulated or real) in `num_ooms`."""
        self._ooms += 1

    def sample(self) -> MemorySample:
        t = self.tracker
        live = t.live_bytes
        if self.budget_bytes is not None:
            total = self.budget_bytes
            free = self.budget_bytes - live
        else:
            info = _meminfo()
            total = info.get("MemTotal", 0)
            free = info.get("MemAvailable", 0)
        return MemorySample(
            device_kind="cpu",
            time_ns=time.perf_counter_ns(),
            allocated_bytes=live,
            reserved_bytes=live,
            free_bytes=free,
            total_bytes=total,
            available_bytes=free,
            outside_pool_bytes=None,
            process_used_bytes=None,
            process_outside_pool_bytes=None,
            num_ooms=self._ooms,
        )

    def _reset(self) -> tuple[int, int]:
        n = self.tracker.reset_peak()
        return n, n

    def _peaks(self) -> tuple[int, int, int, int, int]:
        t = self.tracker
        return t.peak_bytes, t.live_bytes, t.peak_bytes, t.peak_bytes, self._ooms

    def _at_reset_final(self, at_reset: int) -> int:
        # Pre-existing storages first touched in the window also lifted the level
        # at the reset (see tracker): the increment is measured from that level.
        return self.tracker.at_reset_bytes

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """Enter the tracker (re-entrant: nested sessions share one mode)."""
        if self._active:
            self._active += 1
            try:
                yield
            finally:
                self._active -= 1
            return
        self._active = 1
        try:
            with self.tracker:
                yield
        finally:
            self._active = 0

    def close(self) -> None:
        self.tracker.close()


def make_probe(device: torch.device, *, budget_bytes: int | None = None) -> MemoryProbe:
    """The probe for ``device``; ``budget_bytes`` only applies to CPU."""
    if device.type == "cuda":
        return CudaProbe(device)
    if device.type == "cpu":
        return CpuProbe(budget_bytes=budget_bytes)
    raise ValueError(f"no memory probe for device type {device.type!r}")
