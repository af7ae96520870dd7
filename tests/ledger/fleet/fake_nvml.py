"""A fake NVML (the ``pynvml`` module) for a host without a GPU: NVML is outside the
product, so the tests stand in for the driver at pynvml's boundary.

Devices answer what an H200 host's NVML answered (ECC enabled, no errors, rows
remapped 0/0/no/no, retired pages not supported, PCIe replays 2); a test changes a
device's readings, what changes while a claim runs (`during`), and the XIDs that
arrive meanwhile. `during` and the XIDs take effect when the parent drains its
XID event set, i.e. once the claim has ended.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

NOT_SUPPORTED = 3
TIMEOUT = 10


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


H200 = {
    "ecc_mode": 1,
    "ecc": {(1, 0): 0, (0, 0): 0, (1, 1): 0, (0, 1): 0},
    "retired_pages": None,  # not supported on this generation
    "retired_pending": None,
    "remapped": (0, 0, 0, 0),
    "clock_reasons": 0x1,  # idle
    "temperature": 31,
    "clocks": {1: 345, 2: 3201},
    "persistence": 1,
    "mig": (0, 0),
    "pcie_replay": 2,
}


@dataclass
class FakeDevice:
    uuid: str
    name: str = "NVIDIA H200"
    readings: dict[str, Any] = field(default_factory=lambda: {**H200, "ecc": dict(H200["ecc"])})
    during: dict[str, Any] = field(default_factory=dict)
    xids: list[int] = field(default_factory=list)


@dataclass
class _Event:
    device: FakeDevice
    # NVML's spelling
    eventData: int
    eventType: int = 0x8


def fake_nvml(devices: list[FakeDevice]) -> types.ModuleType:
    """A module that answers as pynvml would for ``devices``."""
    m = types.ModuleType("pynvml")
    by_uuid = {d.uuid: d for d in devices}
    queues: dict[int, list[_Event]] = {}

    def unsupported_if_none(v: Any) -> Any:
        if v is None:
            raise NVMLError(NOT_SUPPORTED)
        return v

    def handle_by_uuid(uuid: Any) -> FakeDevice:
        u = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        if u not in by_uuid:
            raise NVMLError(13)  # NVML_ERROR_NOT_FOUND
        return by_uuid[u]

    def register(h: FakeDevice, kind: int, es: list[FakeDevice]) -> None:
        es.append(h)

    def wait(es: list[FakeDevice], timeout_ms: int) -> _Event:
        # The claim has ended: what was to happen meanwhile has happened.
        queue = queues.setdefault(id(es), [])
        for d in es:
            if d.during:
                d.readings.update(d.during)
                d.during = {}
            queue.extend(_Event(d, x) for x in d.xids)
            d.xids = []
        es.clear()
        if not queue:
            raise NVMLError(TIMEOUT)
        return queue.pop(0)

    mem = types.SimpleNamespace(total=150_754_820_096, used=0, free=150_754_820_096)
    funcs: dict[str, Any] = {
        "NVMLError": NVMLError,
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: len(devices),
        "nvmlDeviceGetHandleByIndex": lambda i: devices[i],
        "nvmlDeviceGetHandleByUUID": handle_by_uuid,
        "nvmlDeviceGetUUID": lambda h: h.uuid,
        "nvmlDeviceGetName": lambda h: h.name,
        "nvmlDeviceGetMemoryInfo": lambda h: mem,
        "nvmlDeviceGetComputeRunningProcesses": lambda h: [],
        "nvmlSystemGetDriverVersion": lambda: "570.124.06",
        "nvmlSystemGetCudaDriverVersion": lambda: 12080,
        "nvmlDeviceGetEccMode": lambda h: (h.readings["ecc_mode"], h.readings["ecc_mode"]),
        "nvmlDeviceGetTotalEccErrors": lambda h, kind, counter: h.readings["ecc"][(kind, counter)],
        "nvmlDeviceGetRetiredPages": lambda h, cause: unsupported_if_none(
            h.readings["retired_pages"]
        ),
        "nvmlDeviceGetRetiredPagesPendingStatus": lambda h: unsupported_if_none(
            h.readings["retired_pending"]
        ),
        "nvmlDeviceGetRemappedRows": lambda h: h.readings["remapped"],
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: h.readings["clock_reasons"],
        "nvmlDeviceGetTemperature": lambda h, sensor: h.readings["temperature"],
        "nvmlDeviceGetClockInfo": lambda h, clock: h.readings["clocks"][clock],
        "nvmlDeviceGetPersistenceMode": lambda h: h.readings["persistence"],
        "nvmlDeviceGetMigMode": lambda h: h.readings["mig"],
        "nvmlDeviceGetPcieReplayCounter": lambda h: h.readings["pcie_replay"],
        "nvmlEventSetCreate": lambda: [],
        "nvmlDeviceRegisterEvents": register,
        "nvmlEventSetWait_v2": wait,
        "nvmlEventSetFree": lambda es: None,
    }
    for k, v in funcs.items():
        setattr(m, k, v)
    return m
