"""The ``torch.nn.Module`` objects a workload holds after its ``setup``."""

from __future__ import annotations

from collections.abc import Iterator

import torch

_DEPTH = 3
"""How deep containers (dicts, lists, tuples, plain objects) are searched."""


def modules_held(w: object) -> list[tuple[str, torch.nn.Module]]:
    """The outermost modules reachable from ``w``'s attributes, by attribute path
    (``model``, ``parts[1]``), each once; a module inside another is left out (the
    outer one reaches it). Where the workload holds an optimizer, only the modules it
    trains count: a copy kept aside (a model prepared once, for the next setup) is
    not the one computing."""
    found: dict[int, tuple[str, torch.nn.Module]] = {}
    for path, m in _walk(w, "", _DEPTH, set()):
        found.setdefault(id(m), (path, m))
    inner = {id(sub) for _, m in found.values() for sub in m.modules() if sub is not m}
    outer = [(p, m) for key, (p, m) in found.items() if key not in inner]
    trained = _optimized(w)
    if not trained:
        return outer
    return [(p, m) for p, m in outer if any(id(t) in trained for t in m.parameters())]


def _optimized(w: object) -> set[int]:
    """The ids of the parameters the optimizers ``w`` holds (directly) update."""
    out: set[int] = set()
    for v in vars(w).values() if hasattr(w, "__dict__") else ():
        if isinstance(v, torch.optim.Optimizer):
            out.update(id(t) for g in v.param_groups for t in g["params"])
    return out


def _walk(
    obj: object, path: str, depth: int, seen: set[int]
) -> Iterator[tuple[str, torch.nn.Module]]:
    if id(obj) in seen or depth < 0:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.nn.Module):
        yield path, obj
        return
    if isinstance(obj, torch.Tensor | str | bytes | int | float | bool | type) or obj is None:
        return
    items: list[tuple[str, object]]
    if isinstance(obj, dict):
        items = [(f"{path}[{k!r}]", v) for k, v in obj.items()]
    elif isinstance(obj, list | tuple):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
    elif hasattr(obj, "__dict__") and not isinstance(obj, torch.optim.Optimizer):
        # An optimizer holds the parameters, never the modules that compute with them.
        items = [(f"{path}.{k}" if path else k, v) for k, v in vars(obj).items()]
    else:
        items = []
    for p, v in items:
        yield from _walk(v, p, depth - 1, seen)
