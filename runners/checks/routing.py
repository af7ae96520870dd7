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

from runners.claim.result import Json

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


PAIRS = [
    ("candidate", "base"),
    ("base", "reference"),
    ("candidate", "reference"),
    ("candidate_reference", "reference"),
    ("base_repeat", "base"),
]
"""The arms of a gradient comparison compared for routing, in the receipt's order."""


def record(routes: Mapping[str, Routing], m: dict[str, Json]) -> str:
    """Put each pair's differing routings in ``m["routing"]`` (arms that saved some);
    the sentence a reason repeats (empty without the base's routing)."""
    if not routes.get("base"):
        return ""
    table: dict[str, Json] = {}
    for a, b in PAIRS:
        if routes.get(a) and routes.get(b):
            table[f"{a}_vs_{b}"] = differing(routes[a], routes[b])
    m["routing"] = table
    said = [
        sentence(k.replace("_vs_", " and "), v)  # type: ignore[arg-type]
        for k, v in table.items()
        if k in ("candidate_vs_base", "base_vs_reference", "candidate_reference_vs_reference")
    ]
    return "; ".join(said)


def flipped_unreplayed(arms: Mapping[str, Mapping[str, object]], m: Mapping[str, Json]) -> int:
    """Tokens the two reference-precision arms routed differently, when the candidate's
    did not replay the reference's routing (0 when it did, or when they agree): the
    function part then compares two expert assignments, not two codes."""
    if arms.get("candidate_reference", {}).get("routing_replay") == "replayed":
        return 0
    table = m.get("routing")
    pair = table.get("candidate_reference_vs_reference") if isinstance(table, dict) else None
    flipped = pair.get("tokens_differing") if isinstance(pair, dict) else None
    return flipped if isinstance(flipped, int) else 0


def flipped_low(arms: Mapping[str, Mapping[str, object]], m: Mapping[str, Json]) -> int:
    """Tokens the candidate's low-precision arm routed differently from the reference
    (else from the base), when the candidate's reference-precision arm replayed the
    reference's routing (0 otherwise): flips seen in the low precision, where no arm
    replays, beside a function part that compared the codes on one routing."""
    if arms.get("candidate_reference", {}).get("routing_replay") != "replayed":
        return 0
    table = m.get("routing")
    if not isinstance(table, dict):
        return 0
    for key in ("candidate_vs_reference", "candidate_vs_base"):
        pair = table.get(key)
        flipped = pair.get("tokens_differing") if isinstance(pair, dict) else None
        if isinstance(flipped, int) and flipped:
            return flipped
    return 0
