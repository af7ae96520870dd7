"""What gradient-compare's arms' gradients say: compared tensor by tensor (relative L2,
cosine, max abs difference; the error against the reference arm), then judged by
the check's two rules into its verdict.

``reference``: each tensor's error against the reference-precision run within k
floors + atol (`runners.checks.precision`), a difference beside routings flipped
where nothing replays them inconclusive; ``threshold``: relative L2 against the
base per tensor family over the threshold and the repeat noise floor times the
margin (`runners.checks.noise`). Running the arms and reading what they saved is
`runners.checks.gradient_compare`'s.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch

from runners.checks import noise, precision
from runners.checks.context import Verdict
from runners.checks.outputs import sums
from runners.contract.result import Json


class ReferenceRule(Protocol):
    """The reference rule's bounds (the check's parameters)."""

    @property
    def k(self) -> float: ...

    @property
    def atol(self) -> float: ...


def compare(
    base: dict[str, torch.Tensor],
    cand: dict[str, torch.Tensor],
    threshold: float,
    on: torch.device | None = None,
) -> tuple[list[dict[str, Json]], list[str]]:
    """Per-tensor rows (sorted by name) and the names present in only one arm; large
    tensors summed on ``on`` where it is a GPU (`runners.checks.outputs.sums`)."""
    rows: list[dict[str, Json]] = []
    only = sorted(set(base) ^ set(cand))
    for name in sorted(set(base) & set(cand)):
        b, c = base[name].flatten(), cand[name].flatten()
        if b.shape != c.shape:
            rows.append(
                {
                    "name": name,
                    "numel": int(b.numel()),
                    "shape_mismatch": True,
                    "over_threshold": True,
                    "rel_l2": None,
                    "cosine": None,
                    "max_abs": None,
                }
            )
            continue
        s = sums(c, b, on)
        nb, nc, nd = math.sqrt(s.ref2), math.sqrt(s.x2), math.sqrt(s.diff2)
        rel: float | None = nd / nb if nb > 0 else (0.0 if nd == 0 else None)
        cos = s.dot / (nb * nc) if nb > 0 and nc > 0 else None
        max_abs = s.max_abs
        finite = all(math.isfinite(x) for x in (nb, nc, nd))
        rows.append(
            {
                "name": name,
                "numel": int(b.numel()),
                "rel_l2": rel if finite else None,
                "cosine": cos if finite else None,
                "max_abs": max_abs if math.isfinite(max_abs) else None,
                "over_threshold": (not finite) or rel is None or rel > threshold,
            }
        )
    return rows, only


def errors(
    x: dict[str, torch.Tensor], ref: dict[str, torch.Tensor], on: torch.device | None = None
) -> dict[str, float | None]:
    """``||x - ref|| / ||ref||`` per tensor of ``x`` (None when not finite; inf when the
    reference is zero and ``x`` is not); large tensors summed on ``on`` where it is a
    GPU (`runners.checks.outputs.sums`)."""
    out: dict[str, float | None] = {}
    for name, t in x.items():
        r = ref.get(name)
        if r is None or r.shape != t.shape:
            out[name] = None
            continue
        s = sums(t, r, on)
        nr, nd = math.sqrt(s.ref2), math.sqrt(s.diff2)
        if not (math.isfinite(nr) and math.isfinite(nd)):
            out[name] = None
        else:
            out[name] = nd / nr if nr > 0 else (0.0 if nd == 0 else math.inf)
    return out


def rel_l2(rows: list[dict[str, Json]]) -> dict[str, float | None]:
    """Each compared tensor's relative L2 against the base, by name."""
    return {
        str(r["name"]): float(r["rel_l2"]) if isinstance(r["rel_l2"], float) else None for r in rows
    }


_NAMED = 5
"""Tensors a reason sentence names before saying how many more."""


def by_reference(
    verdicts: list[precision.TensorVerdict],
    rows: list[dict[str, Json]],
    routed: str,
    p: ReferenceRule,
    m: dict[str, Json],
    flipped: int = 0,
    flipped_low: int = 0,
) -> Verdict:
    families = precision.by_family(verdicts)
    m["families"] = [f.to_json() for f in families]
    m["tensors"] = rows  # type: ignore[assignment]
    failed = sorted(
        (v for v in verdicts if v.state == "failed"), key=lambda v: v.badness, reverse=True
    )
    unjudged = [v for v in verdicts if v.state == "inconclusive"]
    m["tensors_beyond_rule"] = len(failed)
    m["failed_tensors"] = [v.name for v in failed]
    m["tensors_inconclusive"] = len(unjudged)
    governs = [v.floor_from for v in verdicts]
    m["floor_from_counts"] = {g: governs.count(g) for g in sorted(set(governs))}
    rule = f"err(candidate, ref) <= {p.k} x floor + {p.atol}"
    if any(v.function_ran for v in verdicts):
        rule += " (and, both in the reference precision, within the floor scaled to it)"
    tail = f"; {routed}" if routed else ""
    if failed and flipped and all(v.failed_by == ["function"] for v in failed):
        return Verdict(
            outcome="inconclusive",
            reason=f"{len(failed)} of {len(verdicts)} gradient tensors beyond the function "
            f"part only, and the two reference-precision arms routed {flipped} token(s) "
            "differently (a router near a tie; the workload cannot replay routing): the "
            f"change cannot be told from the flip{tail}",
            measurements=m,
        )
    replayed_clean = all(v.function_ran and v.function_state == "passed" for v in verdicts)
    if failed and flipped_low and replayed_clean:
        # Every tensor matches in the reference precision on one routing; what is left
        # sits beside routings that differ in the low precision, where nothing replays.
        m["flipped_low_precision_tokens"] = flipped_low
        return Verdict(
            outcome="inconclusive",
            reason=f"{len(failed)} of {len(verdicts)} gradient tensors beyond the low-precision "
            f"part only, beside {flipped_low} token(s) the candidate routed differently in the "
            "low precision (flips the harness sees but cannot replay there); in the reference "
            "precision, on the reference's routing, every tensor is within the rule: the "
            f"change cannot be told from the flips{tail}",
            measurements=m,
        )
    if failed:
        named = "; ".join(precision.describe(v) for v in failed[:_NAMED])
        more = f"; and {len(failed) - _NAMED} more" if len(failed) > _NAMED else ""
        fams = sum(f.state == "failed" for f in families)
        return Verdict(
            outcome="failed",
            reason=f"{len(failed)} of {len(verdicts)} gradient tensors ({fams} of "
            f"{len(families)} families) beyond {rule}: {named}{more}{tail}",
            measurements=m,
        )
    if unjudged:
        return Verdict(
            outcome="inconclusive",
            reason=f"{len(unjudged)} of {len(verdicts)} gradient tensors have no finite "
            f"precision floor (the reference is zero or non-finite where the base is not; "
            f"first: {unjudged[0].name}){tail}",
            measurements=m,
        )
    if not verdicts:
        return Verdict(
            outcome="inconclusive", reason="no gradient tensors to compare", measurements=m
        )
    return Verdict(outcome="passed", reason=None, measurements=m)


def by_threshold(
    rows: list[dict[str, Json]],
    noise_rel: dict[str, float | None],
    threshold: float,
    margin: float,
    m: dict[str, Json],
) -> Verdict:
    families = noise.by_family(noise_rel, rel_l2(rows), threshold, margin)
    m["families"] = [f.to_json() for f in families]
    failed_fams = {f.family for f in families if f.state == "failed"}
    over = [r for r in rows if r["over_threshold"] and noise.family(str(r["name"])) in failed_fams]
    m["tensors_over_threshold"] = len(over)
    m["tensors"] = rows  # type: ignore[assignment]
    if over:
        worst = max(
            over, key=lambda r: float(r["rel_l2"]) if isinstance(r["rel_l2"], float) else math.inf
        )
        return Verdict(
            outcome="failed",
            reason=f"{len(over)} of {len(rows)} gradient tensors over rel-L2 {threshold} and "
            f"over {margin}x their family's noise floor; worst {worst['name']} rel-L2 "
            f"{worst['rel_l2']} (noise {worst.get('noise_rel_l2', 0.0)}) cosine {worst['cosine']}",
            measurements=m,
        )
    if failed_fams:
        names = ", ".join(sorted(failed_fams))
        return Verdict(
            outcome="failed",
            reason=f"gradient families over threshold {threshold} with non-finite figures: {names}",
            measurements=m,
        )
    noisy = [f for f in families if f.state == "inconclusive"]
    if noisy:
        worst_f = max(noisy, key=lambda f: f.noise or 0.0)
        return Verdict(
            outcome="inconclusive",
            reason=f"noise floor over the threshold {threshold} in {len(noisy)} of "
            f"{len(families)} gradient families (base against base); worst {worst_f.family} "
            f"noise rel-L2 {worst_f.noise}, difference {worst_f.diff}",
            measurements=m,
        )
    if not rows:
        return Verdict(
            outcome="inconclusive", reason="no gradient tensors to compare", measurements=m
        )
    return Verdict(outcome="passed", reason=None, measurements=m)
