"""CPU memory tracker: live tensor-storage bytes seen through a TorchDispatchMode.

CPU has no caching-allocator counters, so the CPU probe counts storages
itself. Each untyped storage is counted once (keyed by its C++ address) and
uncounted by a `weakref.finalize` on its Python object, which torch keeps
alive exactly as long as the storage lives. A storage first seen as an input
existed before we looked: it is added to the live, peak and at-reset figures
alike ("retroactive"), so increments stay exact for everything the workload
touches. Storages the workload never touches are invisible and do not matter
for increments.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from runners.contract.result import Json


def _tensors(items: tuple[Any, ...]) -> list[torch.Tensor]:
    # ATen schemas hold tensors at the top level or in one level of list/tuple; the
    # generic pytree walk costs more than the op on small CPU tensors.
    out: list[torch.Tensor] = []
    for x in items:
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, list | tuple):
            for y in x:
                if isinstance(y, torch.Tensor):
                    out.append(y)
                elif isinstance(y, list | tuple | dict):
                    out.extend(t for t in tree_flatten(y)[0] if isinstance(t, torch.Tensor))
        elif isinstance(x, dict):
            out.extend(t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor))
    return out


class LiveStorageTracker(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Counts live bytes of CPU tensor storages created or touched under the mode."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._lock = threading.Lock()
        self._sizes: dict[int, int] = {}
        self._finalizers: dict[int, weakref.finalize[Any, Any]] = {}
        self.live_bytes = 0
        """Bytes of counted storages still alive."""
        self.peak_bytes = 0
        """Highest `live_bytes` since the last `reset_peak`."""
        self.retroactive_bytes = 0
        """Cumulative bytes of pre-existing storages added on first sight."""
        self.at_reset_bytes = 0
        """`live_bytes` at the last `reset_peak`, plus later retroactive additions."""
        self._events: list[dict[str, Json]] | None = None
        self._max_events = 0
        self.events_dropped = 0
        self._seq = 0

    # Observer hooks: an event log is instrumentation, the counters are the probe.
    def start_events(self, max_entries: int) -> None:
        with self._lock:
            self._events = []
            self._max_events = max_entries
            self.events_dropped = 0

    def stop_events(self) -> list[dict[str, Json]]:
        with self._lock:
            events, self._events = self._events or [], None
            return events

    def reset_peak(self) -> int:
        """Start a new peak window at the current level; returns that level."""
        with self._lock:
            self.peak_bytes = self.live_bytes
            self.at_reset_bytes = self.live_bytes
            return self.live_bytes

    def _event(self, kind: str, op: str, nbytes: int) -> None:
        if self._events is None:
            return
        if len(self._events) >= self._max_events:
            self.events_dropped += 1
            return
        self._events.append(
            {
                "seq": self._seq,
                "t_ns": time.perf_counter_ns(),
                "kind": kind,
                "op": op,
                "bytes": nbytes,
                "live_bytes": self.live_bytes,
            }
        )

    def _freed(self, key: int) -> None:
        with self._lock:
            self._finalizers.pop(key, None)
            n = self._sizes.pop(key, None)
            if n is None:
                return
            self.live_bytes -= n
            self._seq += 1
            self._event("free", "", n)

    def _see(self, t: torch.Tensor, op: str, *, pre_existing: bool) -> None:
        if t.device.type != "cpu" or t.layout != torch.strided:
            return
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return  # tensor subclasses without storage
        key = int(st._cdata)
        n = int(st.nbytes())
        with self._lock:
            self._seq += 1
            old = self._sizes.get(key)
            if old is not None:
                if old != n:  # resize_ / set_: the storage grew or shrank in place
                    self._sizes[key] = n
                    self.live_bytes += n - old
                    self.peak_bytes = max(self.peak_bytes, self.live_bytes)
                    self._event("resize", op, n - old)
                return
            self._sizes[key] = n
            self.live_bytes += n
            if pre_existing:
                # It was alive before and at the reset: raise every figure alike.
                self.retroactive_bytes += n
                self.at_reset_bytes += n
                self.peak_bytes += n
                self._event("retroactive", op, n)
            else:
                self.peak_bytes = max(self.peak_bytes, self.live_bytes)
                self._event("alloc", op, n)
        fin = weakref.finalize(st, self._freed, key)
        fin.atexit = False
        with self._lock:
            if key in self._sizes:
                self._finalizers[key] = fin
            else:  # freed between the two locks
                fin.detach()

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        op = str(getattr(func, "__name__", func))
        # Inputs first: a storage seen for the first time as an input pre-existed.
        for x in _tensors(args):
            self._see(x, op, pre_existing=True)
        for x in _tensors(tuple(kwargs.values())):
            self._see(x, op, pre_existing=True)
        out = func(*args, **kwargs)
        for x in _tensors((out,)):
            self._see(x, op, pre_existing=False)
        return out

    def close(self) -> None:
        """Detach every finalizer; the counters stop changing."""
        with self._lock:
            fins = list(self._finalizers.values())
            self._finalizers.clear()
        for f in fins:
            f.detach()


def count_saved_bytes() -> tuple[
    dict[str, int], Callable[[torch.Tensor], Any], Callable[[Any], Any]
]:
    """Saved-tensor hook pair counting what autograd saves: (counts, pack, unpack).

    ``counts`` holds ``saved_tensors`` (pack calls), ``saved_bytes`` (logical bytes
    per pack) and ``saved_storage_bytes`` (each distinct storage once).
    """
    counts = {"saved_tensors": 0, "saved_bytes": 0, "saved_storage_bytes": 0}
    seen: set[int] = set()

    def pack(t: torch.Tensor) -> Any:
        counts["saved_tensors"] += 1
        counts["saved_bytes"] += t.numel() * t.element_size()
        try:
            st = t.untyped_storage()
            key = int(st._cdata)
            if key not in seen:
                seen.add(key)
                counts["saved_storage_bytes"] += int(st.nbytes())
        except (RuntimeError, NotImplementedError):
            pass
        return t

    def unpack(t: Any) -> Any:
        return t

    return counts, pack, unpack
