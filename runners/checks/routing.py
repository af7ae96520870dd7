"""Counting tokens routed differently between two runs of a mixture of experts.

A near-tied router flips its top-k selection for a token under any change of
rounding, and a flipped token moves whole expert gradients. Where a workload
declares its routing (`runners.protocol.DeclaresRouting`), each arm records its
top-k indices per routed layer; two arms are compared token by token (the
selection as a set: order within the top-k does not matter).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from runners.result import Json

Routing = Mapping[str, torch.Tensor]
"""Top-k expert indices ``[tokens, k]`` by routed layer name."""


def differing(a: Routing, b: Routing) -> dict[str, Json]:
    """Token selections (token x routed layer) whose top-k set differs, and tokens with
    any layer differing; layers present in only one run are named."""
    layers = sorted(set(a) & set(b))
    selections = changed = 0
    tokens = 0
    any_layer: torch.Tensor | None = None
    for name in layers:
        x, y = a[name].sort(dim=-1).values, b[name].sort(dim=-1).values
        if x.shape != y.shape:
            shapes = f"{tuple(x.shape)} vs {tuple(y.shape)}"
            return {"comparable": False, "reason": f"{name}: shapes {shapes}"}
        row = (x != y).any(dim=-1)
        selections += int(row.numel())
        changed += int(row.sum())
        tokens = int(row.numel())
        any_layer = row if any_layer is None else any_layer | row
    return {
        "comparable": True,
        "layers": len(layers),
        "tokens": tokens,
        "selections": selections,
        "selections_differing": changed,
        "tokens_differing": 0 if any_layer is None else int(any_layer.sum()),
        "layers_only_in_one": sorted(set(a) ^ set(b)),  # type: ignore[dict-item]
    }


def sentence(pair: str, d: Mapping[str, Json]) -> str:
    """``3 of 8192 token routings differ between candidate and base`` (or why not)."""
    if not d.get("comparable"):
        return f"routing not comparable between {pair}: {d.get('reason')}"
    return (
        f"{d['selections_differing']} of {d['selections']} token routings (tokens x routed "
        f"layers) differ between {pair}"
    )
