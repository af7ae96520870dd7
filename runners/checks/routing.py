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

from runners.contract.result import Json

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


Margins = Mapping[str, torch.Tensor]
"""The router's k-th less (k+1)-th probability ``[tokens]`` by routed layer name
(`runners.adapt.routers.margin`)."""


def margin_floors(base: Margins, reference: Margins) -> dict[str, float]:
    """Per routed layer, the most the reference precision moved any token's margin:
    ``max |margin(base) - margin(reference)|`` (the margins' precision floor, as
    `runners.checks.precision` takes ``err(base, ref)`` for a tensor's)."""
    floors: dict[str, float] = {}
    for name in sorted(set(base) & set(reference)):
        a, b = base[name].double(), reference[name].double()
        if a.shape == b.shape and a.numel():
            moved = float((a - b).abs().max())
            if moved == moved and moved != float("inf"):
                floors[name] = moved
    return floors


def benign_flips(
    head: Routing, base: Routing, base_margins: Margins, floors: Mapping[str, float], k: float
) -> tuple[torch.Tensor | None, dict[str, Json]]:
    """The tokens the head routed otherwise than the base where every flipped selection
    had a base margin within ``k`` times its layer's margin floor (a near tie that a
    change of rounding flips): a mask ``[tokens]`` to set aside, or None where the
    routings are not comparable; with the counts. A flip with a larger base margin, or
    on a layer without a margin floor, is a real change of the router and is kept."""
    d = differing(head, base)
    if not d.get("comparable") or not d.get("layers"):
        return None, {"comparable": False, "reason": str(d.get("reason") or "no routed layers")}
    flipped: torch.Tensor | None = None
    real: torch.Tensor | None = None
    for name in sorted(set(head) & set(base)):
        row = (head[name].sort(dim=-1).values != base[name].sort(dim=-1).values).any(dim=-1)
        row = row.reshape(-1).cpu()
        margin = base_margins.get(name)
        floor = floors.get(name)
        near = torch.zeros_like(row)
        if margin is not None and floor is not None and margin.numel() == row.numel():
            near = margin.reshape(-1).double() <= k * floor
        flipped = row if flipped is None else flipped | row
        hard = row & ~near
        real = hard if real is None else real | hard
    assert flipped is not None and real is not None
    aside = flipped & ~real
    tokens = int(aside.numel())
    n = int(aside.sum())
    return aside, {
        "comparable": True,
        "tokens": tokens,
        "tokens_differing": int(flipped.sum()),
        "tokens_set_aside": n,
        "share_set_aside": n / tokens if tokens else 0.0,
        "tokens_differing_judged": int(real.sum()),
        "margin_floors": dict(floors),
        "k": k,
    }
