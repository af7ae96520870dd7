"""The built-in estimator's stated error: the pair of an absolute and a relative part
that covers a fit's deficits (`runners.workloads.envelope`), in whole integers.

A prediction is ``point + error_bytes + ceil(point * error_permille / 1000)``. Each
measured step the point falls short of, by ``deficit`` at a point estimate ``point``,
asks ``error_bytes + ceil(point * error_permille / 1000) >= deficit``. The pairs that
cover them all are a convex region; the least bound at the reference shape (a point
estimate of ``reference`` bytes: the largest shape the calibration knows of) lies on
one of its vertices: the relative part alone (method 2's error, `alone`), the
absolute part alone (the largest deficit), or a pair two steps' constraints meet at.
Each vertex's permille is taken rounded down and up, its absolute part then the least
that covers every step exactly (`absolute_for`), so every candidate covers them all.

The least is not taken as it is. It is exact on the steps measured, and where the
reference is far beyond them the absolute part alone wins: a shape between those
measured, whose deficit nobody saw, keeps the largest deficit as its margin and
nothing that grows with it (on CPU, a GPT-2 backward at 8x128 measured 0.12 % above
such a bound, a tiny MoE's forward at 1x24 25 bytes above). So the permille is raised
as far as the bound at the reference stays within `SLACK_PERMILLE` of its point above
the least, the absolute part falling as it rises, and no further than the relative
part alone or `SLACK_PERMILLE`, whichever is more: the bound at the reference is never
above method 2's or 2 % of the point, and the absolute part is no more than the small
shapes' noise needs. The relative part is never under `SLACK_PERMILLE`, even where
the steps measured need less: a fit exact on every step of the grid says nothing of
the shapes between them (on an H100 a ViT's backward at 1x8 measured 1.1 % above
such a fit, between grid steps at 1x4 and 1x16 it met exactly).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations

SLACK_PERMILLE = 20
"""How far above the least bound at the reference the stated error may be (a share of
the point there), bought for the most relative error; and the least relative part
(module docstring)."""


def _up(point: int, permille: int) -> int:
    """The relative part's bytes at ``point``: a prediction rounds it up."""
    return -(-point * permille // 1000)


def absolute_for(permille: int, deficits: Sequence[tuple[int, int]]) -> int:
    """The least absolute part that, beside ``permille``, covers every ``(point,
    deficit)`` exactly as a prediction rounds."""
    return max([0, *(d - _up(p, permille) for p, d in deficits)])


def alone(deficits: Sequence[tuple[int, int]]) -> int | None:
    """The least permille that covers every deficit with no absolute part (method 2's
    error); None where a point estimate of 0 falls short (no share of it covers)."""
    worst = 0
    for p, d in deficits:
        if d <= 0:
            continue
        if p <= 0:
            return None
        need = -(-d * 1000 // p)
        # Rounding the error up may still fall short by a byte: step until it covers.
        while _up(p, need) < d:
            need += 1
        worst = max(worst, need)
    return worst


def pair(deficits: Sequence[tuple[int, int]], reference: int) -> tuple[int, int]:
    """``(error_bytes, error_permille)`` covering ``deficits`` (``(point, deficit)``
    with ``deficit > 0``), near the least bound at ``reference`` (module docstring)."""
    if not deficits:
        return 0, SLACK_PERMILLE

    def bound(permille: int) -> int:
        return absolute_for(permille, deficits) + _up(reference, permille)

    candidates = {0}
    for (p1, d1), (p2, d2) in combinations(deficits, 2):
        if p1 != p2 and (d1 - d2) * (p1 - p2) > 0:
            exact = (d1 - d2) * 1000 / (p1 - p2)
            candidates |= {math.floor(exact), math.ceil(exact)}
    # A step's own tight permille (the absolute part 0 there): where the region meets
    # the axis through it.
    candidates |= {-(-d * 1000 // p) for p, d in deficits if p > 0}
    top = alone(deficits)
    if top is not None:
        # Past it the absolute part is 0 and the bound only grows.
        candidates = {r for r in candidates if r <= top} | {top}
    least = min(candidates, key=lambda r: (bound(r), -r))
    limit = bound(least) + reference * SLACK_PERMILLE // 1000
    # Past the least the bound grows with the permille (convex): the largest permille
    # within the limit, by halving, up to the relative part alone or the floor.
    lo, hi = least, max(SLACK_PERMILLE, max(candidates) if top is None else top)
    if lo < SLACK_PERMILLE:
        # The floor: within the limit, to a byte's rounding (the absolute part only
        # falls as the permille rises, and the relative part adds at most the slack).
        lo = SLACK_PERMILLE
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if bound(mid) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return absolute_for(lo, deficits), lo
