"""A GPU's health as NVML reports it, read without torch, for the receipt.

Each reading is what the driver answered: an integer, a word, a list, or the
text ``"not supported"`` where NVML says the device does not support it
(retired pages on a GPU that remaps rows instead; ECC on a consumer GPU).
Any other NVML error is recorded as ``"unavailable: ..."`` with its message.
Nothing is filled in from a model or a default.

XID critical-error events are read through an NVML event set registered
before the claim starts and drained after it ends: NVML reports events that
happen while registered, not those since boot, so a device's XIDs here are
those that arrived during the claim.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["NOT_SUPPORTED", "DeviceHealth", "Watch", "nvml", "read_device", "uuids_of"]

NOT_SUPPORTED = "not supported"

Reading = int | str | list[str]

# NVML's constants, as nvml.h defines them (pynvml exports the same names; spelt
# here so that a fake NVML need not carry them).
_ERROR_NOT_SUPPORTED = 3
_ERROR_TIMEOUT = 10
_CORRECTED, _UNCORRECTED = 0, 1
_VOLATILE, _AGGREGATE = 0, 1
_RETIRE_MULTIPLE_SBE, _RETIRE_DBE = 0, 1
_TEMPERATURE_GPU = 0
_CLOCK_SM, _CLOCK_MEM = 1, 2
_EVENT_XID = 0x8

CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
"""nvmlClocksEventReasons bits (``nvmlClocksThrottleReasons`` before driver 535)."""


def nvml() -> Any | None:
    """The initialised pynvml module, or None (no package, no driver, no GPU)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return None
    return pynvml


def uuids_of(indices: Sequence[str]) -> list[str]:
    """The UUIDs of the GPUs at NVML ``indices`` (those NVML cannot name left out)."""
    nv = nvml()
    out: list[str] = []
    if nv is None:
        return out
    for i in indices:
        try:
            out.append(_text(nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(int(i)))))
        except Exception:
            continue  # not an index NVML knows
    return out


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _failed(e: Exception) -> str:
    if getattr(e, "value", None) == _ERROR_NOT_SUPPORTED:
        return NOT_SUPPORTED
    return f"unavailable: {type(e).__name__}: {e}"[:200]


def _read(fn: Callable[[], Reading]) -> Reading:
    try:
        return fn()
    except Exception as e:  # each reading stands alone: one unsupported, the rest read
        return _failed(e)


def _on_off(v: Any) -> str:
    return "enabled" if int(v) == 1 else "disabled"


def _reasons(mask: int) -> list[str]:
    named = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    rest = mask & ~sum(CLOCK_EVENT_REASONS)
    return named + ([f"0x{rest:x}"] if rest else [])


def read_device(nv: Any, h: Any) -> dict[str, Reading]:
    """Every health reading of one device (handle ``h``), in a fixed order."""

    def ecc(kind: int, counter: int) -> Callable[[], Reading]:
        return lambda: int(nv.nvmlDeviceGetTotalEccErrors(h, kind, counter))

    def remapped() -> dict[str, Reading]:
        try:
            corr, unc, pending, failed = nv.nvmlDeviceGetRemappedRows(h)
        except Exception as e:
            why = _failed(e)
            keys = ("correctable", "uncorrectable", "pending", "failed")
            return {f"remapped_rows_{k}": why for k in keys}
        return {
            "remapped_rows_correctable": int(corr),
            "remapped_rows_uncorrectable": int(unc),
            "remapped_rows_pending": "yes" if pending else "no",
            "remapped_rows_failed": "yes" if failed else "no",
        }

    def clock_reasons() -> Reading:
        fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        fn = fn or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        return _reasons(int(fn(h)))

    out: dict[str, Reading] = {
        "ecc_mode": _read(lambda: _on_off(nv.nvmlDeviceGetEccMode(h)[0])),
        "ecc_volatile_uncorrected": _read(ecc(_UNCORRECTED, _VOLATILE)),
        "ecc_volatile_corrected": _read(ecc(_CORRECTED, _VOLATILE)),
        "ecc_aggregate_uncorrected": _read(ecc(_UNCORRECTED, _AGGREGATE)),
        "ecc_aggregate_corrected": _read(ecc(_CORRECTED, _AGGREGATE)),
        "retired_pages_sbe": _read(
            lambda: len(nv.nvmlDeviceGetRetiredPages(h, _RETIRE_MULTIPLE_SBE))
        ),
        "retired_pages_dbe": _read(lambda: len(nv.nvmlDeviceGetRetiredPages(h, _RETIRE_DBE))),
        "retired_pages_pending": _read(
            lambda: "yes" if int(nv.nvmlDeviceGetRetiredPagesPendingStatus(h)) == 1 else "no"
        ),
        **remapped(),
        "clock_event_reasons": _read(clock_reasons),
        "temperature_c": _read(lambda: int(nv.nvmlDeviceGetTemperature(h, _TEMPERATURE_GPU))),
        "clock_sm_mhz": _read(lambda: int(nv.nvmlDeviceGetClockInfo(h, _CLOCK_SM))),
        "clock_mem_mhz": _read(lambda: int(nv.nvmlDeviceGetClockInfo(h, _CLOCK_MEM))),
        "persistence_mode": _read(lambda: _on_off(nv.nvmlDeviceGetPersistenceMode(h))),
        "mig_mode": _read(lambda: _on_off(nv.nvmlDeviceGetMigMode(h)[0])),
        "pcie_replay_count": _read(lambda: int(nv.nvmlDeviceGetPcieReplayCounter(h))),
    }
    return out


@dataclass
class DeviceHealth:
    """One device's readings before and after a claim, and the XIDs in between."""

    uuid: str
    before: dict[str, Reading]
    after: dict[str, Reading] = field(default_factory=dict)
    xids: list[int] | str = field(default_factory=list)
    """XID critical errors seen while the claim ran, or why none could be seen."""

    def to_json(self) -> dict[str, Any]:
        return {"uuid": self.uuid, "before": self.before, "after": self.after, "xids": self.xids}


class Watch:
    """NVML's view of a claim's devices: `start` before its first use of them (readings,
    and an XID event set registered), `finish` after (readings again, the XIDs drained)."""

    def __init__(self, uuids: Sequence[str]) -> None:
        self.uuids = list(uuids)
        self.devices: list[DeviceHealth] = []
        self.error: str | None = None
        self._nv: Any | None = None
        self._events: Any | None = None
        self._registered: set[str] = set()
        self.started_ns = 0
        self.finished_ns = 0

    def start(self) -> Watch:
        nv = self._nv = nvml()
        if nv is None:
            self.error = "NVML not available"
            return self
        self.started_ns = time.time_ns()
        xid_why: str | None = None
        try:
            self._events = nv.nvmlEventSetCreate()
        except Exception as e:
            xid_why = _failed(e)
        for uuid in self.uuids:
            try:
                h = nv.nvmlDeviceGetHandleByUUID(uuid)
            except Exception as e:
                self.devices.append(DeviceHealth(uuid, {}, xids=_failed(e)))
                continue
            dev = DeviceHealth(uuid, read_device(nv, h), xids=xid_why or [])
            if self._events is not None:
                try:
                    nv.nvmlDeviceRegisterEvents(h, _EVENT_XID, self._events)
                    self._registered.add(uuid)
                except Exception as e:
                    dev.xids = _failed(e)
            self.devices.append(dev)
        return self

    def _drain(self) -> tuple[dict[str, list[int]], str | None]:
        """XIDs by device since `start`, or why they could not be read."""
        nv = self._nv
        got: dict[str, list[int]] = {u: [] for u in self._registered}
        if nv is None or self._events is None:
            return got, None
        wait = getattr(nv, "nvmlEventSetWait_v2", None) or nv.nvmlEventSetWait
        by_uuid = {}
        for u in self._registered:
            try:
                by_uuid[_text(nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByUUID(u)))] = u
            except Exception:
                continue
        for _ in range(10_000):  # bounded: a storm of events does not hold the run
            try:
                ev = wait(self._events, 0)
            except Exception as e:
                if getattr(e, "value", None) == _ERROR_TIMEOUT:
                    return got, None  # none left
                return got, _failed(e)
            try:
                uuid = by_uuid.get(_text(nv.nvmlDeviceGetUUID(ev.device)), "")
            except Exception:
                uuid = ""
            # An event whose device cannot be told counts against every watched one.
            for u in [uuid] if uuid in got else list(got):
                got[u].append(int(ev.eventData))
        return got, None

    def finish(self) -> Watch:
        nv = self._nv
        if nv is None:
            return self
        xids, why = self._drain()
        for dev in self.devices:
            if dev.uuid in xids:
                dev.xids = why if why is not None else sorted(set(xids[dev.uuid]))
            try:
                dev.after = read_device(nv, nv.nvmlDeviceGetHandleByUUID(dev.uuid))
            except Exception as e:
                dev.after = {"error": _failed(e)}
        if self._events is not None:
            with contextlib.suppress(Exception):  # freed with the process anyway
                nv.nvmlEventSetFree(self._events)
            self._events = None
        self.finished_ns = time.time_ns()
        return self

    def to_json(self) -> dict[str, Any]:
        return {
            "source": "nvml",
            "started_ns": self.started_ns,
            "finished_ns": self.finished_ns,
            "error": self.error,
            "devices": [d.to_json() for d in self.devices],
        }
