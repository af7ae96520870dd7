"""Where a step's peak went: the live tensors at the peak, by module and by op.

`AttributingTracker` is a dispatch mode that records, for every storage an op
creates, its size, the op, the module whose forward was running (a stack kept
by global module hooks and by wrapping the named modules' ``forward``, which
also catches a ``forward`` called directly, past the hooks; ``(backward)`` for
the autograd engine's ops) and
whether autograd saved it for the backward (a saved-tensor hook). Allocations
and frees are kept as an event log; after the step the log is replayed once to
find the peak and the storages live at that moment, so the cost is linear in
the number of allocations (no snapshot per new peak). Storages that existed
before the step (weights, the batch) are not part of the increment and are
left out, as the reset-to-peak contract says.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from runners.contract.result import Json
from runners.harness.tracker import _tensors

BACKWARD = "(backward)"
"""Module path of storages made while no module forward runs (the autograd engine)."""
TOP = "(top level)"


@dataclass(slots=True)
class _Made:
    nbytes: int
    op: str
    module: str
    device: str
    key: int


@dataclass(slots=True)
class Attribution:
    """The peak of one step and what was live at it."""

    peak_bytes: int
    """Highest sum of live bytes of storages created during the step."""
    live_at_peak: list[dict[str, Json]]
    """The largest storages live at the peak: bytes, op, module, saved, device."""
    by_module: dict[str, int]
    by_op: dict[str, int]
    saved_bytes: int
    """Of the peak: storages autograd saved for the backward."""
    temporary_bytes: int
    """Of the peak: everything else (outputs, workspaces, gradients being formed)."""
    allocations: int
    allocator: dict[str, Json] = field(default_factory=dict)
    """The allocator's own view (CUDA: allocated, reserved, peak, outside the pool)."""

    def to_json(self, top: int) -> dict[str, Json]:
        return {
            "peak_bytes": self.peak_bytes,
            "saved_for_backward_bytes": self.saved_bytes,
            "temporary_bytes": self.temporary_bytes,
            "allocations": self.allocations,
            "by_module": dict(_top(self.by_module, top)),
            "by_op": dict(_top(self.by_op, top)),
            "largest": self.live_at_peak[:top],  # type: ignore[dict-item]
            "allocator": self.allocator,
        }


def _top(d: dict[str, int], n: int) -> list[tuple[str, int]]:
    return sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


class AttributingTracker(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Records each new storage's origin and every alloc/free, for `attribute`."""

    def __init__(self, modules: dict[str, torch.nn.Module] | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._modules = list((modules or {}).values())
        self._names = {id(m): name for name, m in (modules or {}).items()}
        # Re-entrant: a finalizer (a free) can run from a collection inside the lock.
        self._lock = threading.RLock()
        self._made: list[_Made] = []
        """Every storage created under the mode, by allocation number."""
        self._events: list[tuple[int, int]] = []
        """(allocation number, +1 alloc / -1 free) in order."""
        self._current: dict[int, int] = {}
        """Live storage key -> its allocation number (negative: pre-existing)."""
        self._saved: set[int] = set()
        self._fins: list[weakref.finalize[Any, Any]] = []
        self._stack: list[str] = []

    # -- module stack -------------------------------------------------------
    def _push(self, module: torch.nn.Module, *_: Any) -> None:
        name = self._names.get(id(module))
        if name is None:
            parent = self._stack[-1] if self._stack else ""
            name = f"{parent}/{type(module).__name__}".lstrip("/")
        self._stack.append(name)

    def _pop(self, *_: Any) -> None:
        if self._stack:
            self._stack.pop()

    def _wrap(self, module: torch.nn.Module, forward: Any) -> Any:
        @functools.wraps(forward)
        def call(*args: Any, **kwargs: Any) -> Any:
            self._push(module)
            try:
                return forward(*args, **kwargs)
            finally:
                self._pop()

        return call

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        with suppress(RuntimeError, NotImplementedError):
            alloc = self._current.get(int(t.untyped_storage()._cdata))
            if alloc is not None and alloc >= 0:
                self._saved.add(alloc)
        return t

    @contextmanager
    def watching(self) -> Iterator[AttributingTracker]:
        """Install the module hooks, the saved-tensor hooks and the dispatch mode."""
        from torch.nn.modules import module as nn_module

        pre = nn_module.register_module_forward_pre_hook(self._push)
        post = nn_module.register_module_forward_hook(self._pop)
        wrapped = [m for m in self._modules if "forward" not in vars(m)]
        for m in wrapped:
            m.forward = self._wrap(m, m.forward)
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t), self:
                yield self
        finally:
            pre.remove()
            post.remove()
            for m in wrapped:
                del m.forward
            for f in self._fins:
                f.detach()

    # -- storages -----------------------------------------------------------
    def _freed(self, key: int, alloc: int) -> None:
        with self._lock:
            if self._current.get(key) == alloc:
                del self._current[key]
            if alloc >= 0:
                self._events.append((alloc, -1))

    def _see(self, t: torch.Tensor, op: str, *, new: bool) -> None:
        if t.layout != torch.strided:
            return
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return
        # Storage addresses are reused once freed: a key names a storage only while
        # it lives, so each sighting is checked against the live ones.
        key = int(st._cdata)
        with self._lock:
            if key in self._current:
                return
            if new:
                alloc = len(self._made)
                module = self._stack[-1] if self._stack else BACKWARD
                self._made.append(_Made(int(st.nbytes()), op, module, t.device.type, key))
                self._events.append((alloc, +1))
            else:
                alloc = -1 - len(self._made)  # existed before the step: not counted
            self._current[key] = alloc
        fin = weakref.finalize(st, self._freed, key, alloc)
        fin.atexit = False
        self._fins.append(fin)

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        op = str(getattr(func, "__name__", func))
        for x in _tensors(args) + _tensors(tuple(kwargs.values())):
            self._see(x, op, new=False)
        out = func(*args, **kwargs)
        for x in _tensors((out,)):
            self._see(x, op, new=True)
        return out

    # -- the answer ---------------------------------------------------------
    def attribute(self, keep: int = 50) -> Attribution:
        """Replay the event log: the peak and the storages live at it."""
        with self._lock:
            events = list(self._events)
            made = list(self._made)
            saved = set(self._saved)
        live = peak = peak_at = 0
        for i, (key, sign) in enumerate(events):
            live += sign * made[key].nbytes
            if live > peak:
                peak, peak_at = live, i + 1
        alive: set[int] = set()
        for key, sign in events[:peak_at]:
            if sign > 0:
                alive.add(key)
            else:
                alive.discard(key)
        by_module: dict[str, int] = {}
        by_op: dict[str, int] = {}
        rows: list[tuple[int, dict[str, Json]]] = []
        saved_bytes = 0
        for key in alive:
            m = made[key]
            by_module[m.module] = by_module.get(m.module, 0) + m.nbytes
            by_op[m.op] = by_op.get(m.op, 0) + m.nbytes
            is_saved = key in saved
            saved_bytes += m.nbytes if is_saved else 0
            rows.append(
                (
                    m.nbytes,
                    {
                        "bytes": m.nbytes,
                        "op": m.op,
                        "module": m.module,
                        "saved_for_backward": is_saved,
                        "device": m.device,
                    },
                )
            )
        rows.sort(key=lambda r: -r[0])
        return Attribution(
            peak_bytes=peak,
            live_at_peak=[r for _, r in rows[:keep]],
            by_module=by_module,
            by_op=by_op,
            saved_bytes=saved_bytes,
            temporary_bytes=peak - saved_bytes,
            allocations=len(made),
        )


def module_names(*roots: object) -> dict[str, torch.nn.Module]:
    """Every `torch.nn.Module` reachable from the attributes of ``roots`` (a workload's
    ``model``, ...) by dotted path, so the attribution names modules as the code does."""
    out: dict[str, torch.nn.Module] = {}
    seen: set[int] = set()
    for root in roots:
        for attr, value in vars(root).items() if hasattr(root, "__dict__") else ():
            if isinstance(value, torch.nn.Module):
                for name, mod in value.named_modules():
                    if id(mod) not in seen:
                        seen.add(id(mod))
                        out[f"{attr}.{name}" if name else attr] = mod
    return out
