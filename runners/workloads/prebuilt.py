"""Build once, copy per setup: the harness's own preparation for a workload that has
no ``prepare()``.

A workload written before `runners.protocol.SupportsPrepare` existed builds its model
in every ``setup``: for a ~0.9 B model that is 5–8 s of CPU work, about twelve times
in one plan. The fork server (CPU, no CUDA) runs ``setup(cpu, seed)`` once per seed
the checks use and keeps the workload as it stands after it: the *snapshot*. In a
forked claim, ``setup(device, seed)`` on a workload loaded with the same entry point
and parameters becomes a copy of the snapshot onto ``device`` (`setup`): one
``copy.deepcopy`` of the workload's state whose memo maps every tensor the snapshot
holds to its copy on ``device`` and every ``torch.device`` it holds to ``device``, so
the model and the optimizer that refers to its parameters stay one object graph, as
``setup`` left them. The snapshot itself is never moved or trained.

The route is taken only when it is known to give what ``setup`` gives:

- the snapshot holds only CPU tensors that are leaves (no autograd history), no two
  tensors share storage (a copy would split them), and no function it holds closes
  over a tensor or module (a hook would still reach the snapshot);
- after the copy, every tensor the workload holds is on ``device``;
- the random state ``setup`` leaves is replayed: the CPU generator's state as it
  stood after the snapshot's ``setup`` (when ``setup`` seeded it and did not restore
  it), and on CUDA the last seed it gave ``torch.manual_seed``.

Anything else (and any error while copying) falls back to the workload's own
``setup``. What this cannot know is a ``setup`` that builds differently on another
device (weights drawn on the device, an implementation chosen by device type): such a
plan turns the route off with ``LEDGER_PREBUILD=0``. Which route each setup took is
recorded in the receipt (``setup_routes``: ``workload``, ``prepared`` for a workload's
own ``prepare()``, ``prebuilt``).
"""

from __future__ import annotations

import contextlib
import copy
import os
import secrets
import signal
import threading
import types
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from runners.protocol import SupportsPrepare, Workload

CPU = torch.device("cpu")
SEEDS = (0,)
"""The seeds prebuilt: every check's default (a plan naming another seed gets setup)."""


@dataclass(slots=True)
class Snapshot:
    """A workload as ``setup(cpu, seed)`` left it, with the random state it left."""

    workload: Workload
    rng_after: torch.Tensor | None
    """The CPU generator's state after ``setup``, when ``setup`` seeded and changed it."""
    cuda_seed: int | None
    """The last seed ``setup`` gave ``torch.manual_seed`` (it seeds CUDA too)."""


_BUILT: dict[tuple[str, str, str], dict[int, Snapshot]] = {}
"""The snapshots by the loader's key, then by seed."""
_ORIGIN: weakref.WeakKeyDictionary[object, tuple[str, str, str]] = weakref.WeakKeyDictionary()
_ROUTES: list[str] = []


def enabled() -> bool:
    return os.environ.get("LEDGER_PREBUILD", "1") != "0"


def note_origin(w: Workload, key: tuple[str, str, str]) -> None:
    """Remember which entry point and parameters built ``w`` (the loader's key)."""
    # No weak references (__slots__ without __weakref__): never prebuilt.
    with contextlib.suppress(TypeError):
        _ORIGIN[w] = key


PREBUILD_TIMEOUT_S = float(os.environ.get("LEDGER_PREBUILD_TIMEOUT_S", "600"))
"""How long the server's one build of a workload may take (its ``setup`` on CPU): a
setup that never returns must not keep every claim from starting."""


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise `TimeoutError` in the code running here once ``seconds`` have passed."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"took over {seconds:g} s (LEDGER_PREBUILD_TIMEOUT_S)")

    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only; a fork server builds there
        return
    before = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def prebuild(w: Workload, key: tuple[str, str, str], seed: int = SEEDS[0]) -> str:
    """In the fork server: ``w.setup(cpu, seed)`` on a freshly loaded workload that
    is never handed to a claim, kept as the snapshot of ``(key, seed)``. Returns ``""``
    when kept, else why not (then every claim calls ``setup`` itself)."""
    with _deadline(PREBUILD_TIMEOUT_S):
        return _prebuild(w, key, seed)


def _prebuild(w: Workload, key: tuple[str, str, str], seed: int) -> str:
    seen_seeds: list[int] = []
    saved = torch.get_rng_state()
    # A state no setup can arrive at by chance: equal after setup only when setup left
    # the generator alone (or restored it, as fork_rng does).
    torch.manual_seed(secrets.randbits(63))
    before = torch.get_rng_state()
    try:
        with _recording_seeds(seen_seeds):
            w.setup(CPU, seed)
        after = torch.get_rng_state()
    finally:
        torch.set_rng_state(saved)  # the fork server's own state, unchanged for claims
    why = refusal(w)
    if why:
        return why
    _BUILT.setdefault(key, {})[seed] = Snapshot(
        workload=w,
        # Seeded and changed: the state is setup's, and the claim gets it. Changed
        # without a seed: setup drew from whatever state it found, which no copy repeats.
        rng_after=after if seen_seeds and not torch.equal(before, after) else None,
        cuda_seed=seen_seeds[-1] if seen_seeds else None,
    )
    return ""


def setup(w: Workload, device: torch.device, seed: int) -> None:
    """``w.setup(device, seed)``, or the snapshot's copy (module docstring); the route
    taken is noted for the receipt (`routes`)."""
    snap = _snapshot_for(w, seed)
    if snap is not None:
        state = _copy_onto(snap, w, device)
        if state is not None:
            w.__dict__.clear()
            w.__dict__.update(state)
            _replay_rng(snap, device)
            _ROUTES.append("prebuilt")
            return
    w.setup(device, seed)
    _ROUTES.append("prepared" if isinstance(w, SupportsPrepare) else "workload")


def routes() -> list[str]:
    """The routes the setups in this process took, each once, in order (then reset)."""
    out = list(dict.fromkeys(_ROUTES))
    _ROUTES.clear()
    return out


def _snapshot_for(w: Workload, seed: int) -> Snapshot | None:
    if not enabled():
        return None
    try:
        key = _ORIGIN.get(w)
    except TypeError:
        return None
    snap = _BUILT.get(key, {}).get(seed) if key is not None else None
    if snap is None or snap.workload is w or type(snap.workload) is not type(w):
        return None
    if not hasattr(w, "__dict__"):
        return None
    return snap


def _copy_onto(snap: Snapshot, w: Workload, device: torch.device) -> dict[str, Any] | None:
    """The snapshot's state with every tensor on ``device``, or None (then ``setup``)."""
    tensors, devices, _ = _reachable(snap.workload)
    memo: dict[int, Any] = {id(snap.workload): w}
    for t in tensors:
        moved = t.detach().to(device, copy=True)  # never the snapshot's own storage
        if isinstance(t, torch.nn.Parameter):
            memo[id(t)] = torch.nn.Parameter(moved, requires_grad=t.requires_grad)
        else:
            memo[id(t)] = moved.requires_grad_(t.requires_grad)
    for d in devices:
        memo[id(d)] = device
    try:
        state: dict[str, Any] = copy.deepcopy(snap.workload.__dict__, memo)
    except Exception:
        return None
    got, _, _ = _reachable(state)
    # Where a tensor made for ``device`` lands: "cuda" names cuda:N, the current one.
    want = torch.empty(0, device=device).device
    if any(t.device != want for t in got):
        return None
    return state


def _replay_rng(snap: Snapshot, device: torch.device) -> None:
    if snap.cuda_seed is not None and device.type == "cuda":
        torch.cuda.manual_seed_all(snap.cuda_seed)
    if snap.rng_after is not None:
        torch.set_rng_state(snap.rng_after)


class _recording_seeds:
    """``torch.manual_seed``'s calls during the snapshot's ``setup``, recorded."""

    def __init__(self, into: list[int]) -> None:
        self.into = into
        self.saved: Callable[..., Any] | None = None

    def __enter__(self) -> None:
        self.saved = torch.manual_seed
        real = self.saved
        into = self.into

        def manual_seed(seed: int) -> Any:
            into.append(int(seed))
            return real(seed)

        torch.manual_seed = manual_seed
        torch.random.manual_seed = manual_seed

    def __exit__(self, *exc: object) -> None:
        assert self.saved is not None
        torch.manual_seed = self.saved
        torch.random.manual_seed = self.saved


def refusal(w: Workload) -> str:
    """Why the snapshot could not be copied faithfully ("" when it can)."""
    if not hasattr(w, "__dict__"):
        return "the workload keeps no attributes to copy"
    tensors, _, closures = _reachable(w)
    if not tensors:
        return "setup left no tensors to copy"
    if closures:
        return f"a function it holds closes over the model ({closures[0]})"
    storages: dict[int, int] = {}
    for t in tensors:
        if t.device.type != "cpu":
            return f"a tensor on {t.device} after setup on CPU"
        if t.grad_fn is not None:
            return "a tensor with autograd history"
        if t.numel() == 0:
            continue
        ptr = t.untyped_storage().data_ptr()
        if ptr in storages and storages[ptr] != id(t):
            return "two tensors share storage (a copy would split them)"
        storages[ptr] = id(t)
    return ""


_ATOMS = (str, bytes, int, float, bool, complex, type(None), type, types.ModuleType)


def _reachable(root: object) -> tuple[list[torch.Tensor], list[torch.device], list[str]]:
    """The tensors and devices reachable from ``root`` through containers and object
    attributes, and the functions found that close over a tensor or module."""
    tensors: dict[int, torch.Tensor] = {}
    devices: dict[int, torch.device] = {}
    closures: list[str] = []
    seen: set[int] = set()
    stack: list[object] = [root]
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, _ATOMS):
            continue
        seen.add(id(o))
        if isinstance(o, torch.Tensor):
            tensors[id(o)] = o
            if o.is_leaf and o.grad is not None:
                stack.append(o.grad)
            continue
        if isinstance(o, torch.device):
            devices[id(o)] = o
            continue
        if isinstance(o, types.FunctionType):
            for cell in o.__closure__ or ():
                try:
                    v = cell.cell_contents
                except ValueError:
                    continue
                if isinstance(v, torch.Tensor | torch.nn.Module) or v is root:
                    closures.append(o.__qualname__)
            continue
        if isinstance(o, types.MethodType):
            stack.append(o.__self__)
            continue
        stack.extend(_children(o))
    return list(tensors.values()), list(devices.values()), closures


def _children(o: object) -> Iterator[object]:
    if isinstance(o, dict):
        yield from o.keys()
        yield from o.values()
    elif isinstance(o, list | tuple | set | frozenset):
        yield from o
    else:
        d = getattr(o, "__dict__", None)
        if isinstance(d, dict):
            yield d
        for name in getattr(type(o), "__slots__", ()):
            if isinstance(name, str) and hasattr(o, name):
                yield getattr(o, name)
