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
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from ledger.evidence.errors import InputError

__all__ = [
    "SNAPSHOT_CPU_S",
    "SNAPSHOT_DEADLINE_S",
    "MemoryTimeline",
    "read_snapshot",
    "timeline_of",
]

SNAPSHOT_CPU_S = 5
"""CPU seconds the worker process may spend on one snapshot (RLIMIT_CPU)."""
SNAPSHOT_DEADLINE_S = 10.0
"""Wall-clock seconds before the worker is killed, whatever it is doing."""
SNAPSHOT_MEMORY_BYTES = 1024 * 1024 * 1024
"""Address space of the worker (RLIMIT_AS): a pickle cannot balloon the server."""
MAX_EVENTS = 2_000_000
"""Trace events replayed at most; a longer trace is cut, and says so."""
MAX_POINTS = 2_000
"""Points per series handed back for the chart (the peak is always kept)."""
_MAX_FRAMES = 64


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
    truncated: bool = False
    """The trace was longer than MAX_EVENTS: only its start was replayed."""


def _frames(event: dict[str, Any]) -> list[str]:
    out = []
    frames = event.get("frames") or []
    # Bounded: a crafted pickle can make every event share one huge frames list.
    for f in frames[:_MAX_FRAMES] if isinstance(frames, list) else []:
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
    live: dict[Any, int] = {}
    peak_at = 0
    if not isinstance(trace, list):
        raise InputError("memory snapshot's device trace is not a list")
    if len(trace) > MAX_EVENTS:
        trace, tl.truncated = trace[:MAX_EVENTS], True
    for i, ev in enumerate(trace):
        if not isinstance(ev, dict):
            continue
        action, size = ev.get("action"), ev.get("size", 0)
        if not isinstance(size, int):
            continue
        t = float(ev.get("time_us", i))
        if action == "alloc":
            alloc += size
            live[_addr(ev)] = size
        elif action in ("free_completed",):
            alloc -= size
            live.pop(_addr(ev), None)
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
            peak_at = len(tl.allocated)
    # The live set at the peak, replayed once more up to it (not copied at every new peak).
    peak_live = _live_at(trace, peak_at) if tl.allocated else []
    tl.top = sorted(peak_live, key=lambda a: -int(a["size"]))[:top]
    tl.allocated = _thin(tl.allocated, tl.peak)
    tl.reserved = _thin(tl.reserved, None)
    return tl


def _addr(ev: dict[str, Any]) -> Any:
    addr = ev.get("addr")
    return addr if isinstance(addr, int | str) else None


def _live_at(trace: list[Any], upto: int) -> list[dict[str, Any]]:
    """The live allocations (size, frames) after the first `upto` counted events."""
    live: dict[Any, dict[str, Any]] = {}
    counted = 0
    for ev in trace:
        if counted >= upto:
            break
        if not isinstance(ev, dict) or not isinstance(ev.get("size", 0), int):
            continue
        action = ev.get("action")
        if action == "alloc":
            live[_addr(ev)] = ev
        elif action == "free_completed":
            live.pop(_addr(ev), None)
        elif action not in ("segment_alloc", "segment_free"):
            continue
        counted += 1
    return [{"size": ev.get("size", 0), "frames": _frames(ev)} for ev in live.values()]


def _thin(
    points: list[tuple[float, float]], keep: tuple[float, float] | None
) -> list[tuple[float, float]]:
    """At most MAX_POINTS points, evenly spaced, the peak kept."""
    if len(points) <= MAX_POINTS:
        return points
    step = len(points) / MAX_POINTS
    out = [points[int(i * step)] for i in range(MAX_POINTS)]
    if keep is not None and keep not in out:
        out.append(keep)
        out.sort()
    return out


# -- the worker: one bounded parse per artifact digest --------------------------------

_CACHE: OrderedDict[str, MemoryTimeline | str] = OrderedDict()
_CACHE_SIZE = 64
_LOCKS: dict[str, threading.Lock] = {}
_GUARD = threading.Lock()


def _limit_worker() -> None:
    """In the worker: CPU seconds and address space it may use."""
    import resource

    resource.setrlimit(resource.RLIMIT_CPU, (SNAPSHOT_CPU_S, SNAPSHOT_CPU_S + 1))
    resource.setrlimit(resource.RLIMIT_AS, (SNAPSHOT_MEMORY_BYTES, SNAPSHOT_MEMORY_BYTES))


def _work(data: bytes, conn: Any) -> None:
    try:
        _limit_worker()
        conn.send(read_snapshot(data))
    except InputError as e:
        conn.send(e.reason())
    except MemoryError:
        conn.send("memory snapshot needs more memory than the reader may use")
    finally:
        conn.close()


def _parse_in_worker(data: bytes, deadline_s: float) -> MemoryTimeline | str:
    """read_snapshot in a separate process with CPU, memory and time limits;
    the reason (a string) when it fails or is stopped."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_work, args=(data, child), daemon=True)
    proc.start()
    child.close()
    try:
        if parent.poll(deadline_s):
            try:
                got: MemoryTimeline | str = parent.recv()
                return got
            except EOFError:
                pass
        return (
            f"memory snapshot not read: it needs more than {SNAPSHOT_CPU_S} s of CPU, "
            f"{deadline_s:g} s or {SNAPSHOT_MEMORY_BYTES // 2**20} MiB to replay"
        )
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        parent.close()


def timeline_of(
    digest: str, data: bytes, deadline_s: float = SNAPSHOT_DEADLINE_S
) -> MemoryTimeline:
    """The snapshot's timeline, read at most once per artifact digest (the answer,
    or the refusal, is cached): a crafted snapshot costs one bounded parse."""
    with _GUARD:
        lock = _LOCKS.setdefault(digest, threading.Lock())
    with lock:
        got = _CACHE.get(digest)
        if got is None:
            got = _parse_in_worker(data, deadline_s)
            with _GUARD:
                _CACHE[digest] = got
                while len(_CACHE) > _CACHE_SIZE:
                    old, _ = _CACHE.popitem(last=False)
                    _LOCKS.pop(old, None)
        else:
            with _GUARD:
                _CACHE.move_to_end(digest)
    if isinstance(got, str):
        raise InputError(got)
    return got
