"""A PyTorch CUDA memory snapshot (`torch.cuda.memory._snapshot()`, pickled)
read without PyTorch and without running anything it contains.

The snapshot is a pickle uploaded by a runner: unpickled with a loader that
refuses every global, so only dicts, lists, strings and numbers come out (a
crafted pickle cannot call anything). From `device_traces` the allocated and
reserved bytes are replayed event by event; at the allocated peak the live
allocations are kept with the Python frames that made them.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass, field
from typing import Any

from ledger.errors import InputError

__all__ = ["MemoryTimeline", "read_snapshot"]


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"global {module}.{name} refused")


@dataclass
class MemoryTimeline:
    allocated: list[tuple[float, float]] = field(default_factory=list)
    reserved: list[tuple[float, float]] = field(default_factory=list)
    peak: tuple[float, float] = (0.0, 0.0)
    top: list[dict[str, Any]] = field(default_factory=list)
    """The largest live allocations at the peak: size and frames."""
    events: int = 0


def _frames(event: dict[str, Any]) -> list[str]:
    out = []
    for f in event.get("frames") or []:
        if isinstance(f, dict):
            out.append(f"{f.get('filename', '?')}:{f.get('line', '?')} {f.get('name', '?')}")
    # Python frames first: they are what a person recognises.
    py = [f for f in out if ".py:" in f]
    return (py or out)[:6]


def read_snapshot(data: bytes, device: int = 0, top: int = 8) -> MemoryTimeline:
    try:
        snap = _PlainUnpickler(io.BytesIO(data)).load()
    except Exception as e:  # any malformed pickle is an input problem, not ours
        raise InputError(f"not a readable memory snapshot: {type(e).__name__}: {e}") from None
    traces = snap.get("device_traces") if isinstance(snap, dict) else None
    if not isinstance(traces, list) or not traces:
        raise InputError("memory snapshot has no device_traces (recorded without history?)")
    trace = traces[min(device, len(traces) - 1)] or []
    tl = MemoryTimeline()
    alloc = reserved = 0
    live: dict[Any, dict[str, Any]] = {}
    peak_live: list[dict[str, Any]] = []
    for i, ev in enumerate(trace):
        if not isinstance(ev, dict):
            continue
        action, size = ev.get("action"), ev.get("size", 0)
        if not isinstance(size, int):
            continue
        t = float(ev.get("time_us", i))
        if action == "alloc":
            alloc += size
            live[ev.get("addr")] = {"size": size, "frames": _frames(ev)}
        elif action in ("free_completed",):
            alloc -= size
            live.pop(ev.get("addr"), None)
        elif action == "segment_alloc":
            reserved += size
        elif action == "segment_free":
            reserved -= size
        else:
            continue
        tl.events += 1
        tl.allocated.append((t, float(alloc)))
        tl.reserved.append((t, float(reserved)))
        if alloc > tl.peak[1]:
            tl.peak = (t, float(alloc))
            peak_live = list(live.values())
    tl.top = sorted(peak_live, key=lambda a: -int(a["size"]))[:top]
    return tl
