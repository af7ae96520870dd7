"""The built-in estimator's fit: an upper envelope over measured step costs.

A step's peak increment is modelled per phase as the exactly known bytes of the
model (the gradients a backward allocates, `ModelBytes`) plus a step cost that is
a non-negative combination of named basis terms of the shape. The step cost is
measured with the gradients already allocated (a backward accumulating into them),
so a peak of activations hidden under the gradients at small shapes is still
seen, and the sum bounds a step that allocates its gradients afresh. That sum counts
the gradients twice where a small step peaks before they are all allocated (a tiny
model's full fine-tune measured half its bound), so a backward is also fit on the same
shapes measured as a check runs them, from no gradients (`PhaseFit.fresh`); each fit
covers every step it was measured and validated on, and the lesser bounds (`tighter`).
The basis:

- ``constant``: 1 (what every step allocates whatever its size);
- ``sequences``: ``batch`` (what each sequence adds whatever its length: a pooled
  row, a per-row loss, a mask's rows);
- ``tokens``: ``batch * seq`` (activations, logits, routed rows);
- ``attention``: ``batch * seq**2``, where attention scores are materialised.

The coefficients are fit by non-negative least squares on residuals relative to
the measured increment (so small shapes weigh as much as large ones), giving the
*point* estimate. The stated error has two parts, an absolute one (``error_bytes``)
and a relative one (``error_permille``): the prediction is
``point + error_bytes + ceil(point * error_permille / 1000)``, on or above every
measured point: an upper envelope, not a line through the middle. A step's cost
at small shapes is mostly fixed (allocator rounding, workspaces: a few MiB on a
GPU), so a relative error alone would have to be hundreds of percent there, and
would multiply the same share into the large shapes a plan runs. The pair is the
one that covers every measured point with (nearly) the least bound at the reference
shape, the largest the calibration knows of (its validation shape, else its largest
measured one): `runners.workloads.stated_error`.

Coefficients are stored as exact integers (bytes per 1024 units, rounded up), the
error as whole bytes and a whole permille, so the record signs integers and every
prediction is recomputed exactly. A record of method 2 (a relative error alone)
has no ``error_bytes``: read as 0, it predicts what it did, under the same id.

Imports nothing heavy: the fit is small linear algebra in Python, readable and
checkable without torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import combinations
from typing import Any

from runners.workloads import stated_error

VERSION = "5"
"""The built-in estimator's method: a calibration recorded under another is refit (5:
a backward fit twice, the fresh envelope bounding where it is the lesser; 4:
every subset of terms solved, its columns scaled, where 3 solved on a GPU only those
with attention; 3: the stated error an absolute and a relative part; 2: a relative part
alone, seven grid steps a phase, `runners.adapt.calibrate.GRID`; 1: fourteen)."""

TERMS = ("constant", "sequences", "tokens", "attention")
"""Every basis term the method knows, in order."""

UNIT = 1024
"""Coefficients are bytes per `UNIT` units of their term, rounded up."""

Shapes = Sequence[tuple[int, int]]
"""``(batch, seq)`` shapes: where the stated error is made least (`_with_error`)."""


def features(terms: Sequence[str], batch: int, seq: int) -> dict[str, int]:
    """Each basis term's value at a ``batch x seq`` shape."""
    values = {
        "constant": 1,
        "sequences": batch,
        "tokens": batch * seq,
        "attention": batch * seq * seq,
    }
    return {t: values[t] for t in terms}


@dataclass(frozen=True, slots=True)
class Point:
    """One measured step of a phase."""

    batch: int
    seq: int
    measured_bytes: int
    """The step's reset-to-peak increment."""
    with_known: bool = True
    """Whether the increment includes the model's known bytes (a backward that
    allocated its gradients); False: they were allocated before the step (a backward
    accumulating into them), so the increment is the step's own cost."""

    def bound(self, known_bytes: int) -> int:
        """What the prediction must cover for this step: its increment, with the known
        bytes added where they were allocated before it."""
        return self.measured_bytes + (0 if self.with_known else known_bytes)

    def json(self) -> dict[str, int | bool]:
        return {
            "batch": self.batch,
            "seq": self.seq,
            "measured_bytes": self.measured_bytes,
            "with_known": self.with_known,
        }


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """``a x = b`` by Gaussian elimination with partial pivoting; None if singular."""
    n = len(b)
    m = [[*row, rhs] for row, rhs in zip(a, b, strict=True)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-12:
            return None
        m[col], m[piv] = m[piv], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                for c in range(col, n + 1):
                    m[r][c] -= f * m[col][c]
    return [m[i][n] / m[i][i] for i in range(n)]


def _nnls(rows: list[list[float]], target: list[float]) -> list[float]:
    """Non-negative least squares for a handful of columns: every subset of columns is
    solved unconstrained, and the best solution with no negative coefficient wins."""
    k = len(rows[0]) if rows else 0
    # Each column scaled to a largest entry of 1, its coefficient scaled back: rows are
    # weighted by 1 / the measured bytes, so on a GPU (hundreds of MiB a step) a column
    # of small terms (constant, tokens) squared to ~1e-17, under the singularity test,
    # and only subsets with the largest term (attention) were solved (method 3).
    scale = [max((abs(r[j]) for r in rows), default=0.0) or 1.0 for j in range(k)]
    rows = [[v / scale[j] for j, v in enumerate(r)] for r in rows]
    return [c / s for c, s in zip(_nnls_scaled(rows, target, k), scale, strict=True)]


def _nnls_scaled(rows: list[list[float]], target: list[float], k: int) -> list[float]:
    """`_nnls` on columns of comparable size."""
    best: tuple[float, list[float]] = (math.inf, [0.0] * k)
    for size in range(1, k + 1):
        for cols in combinations(range(k), size):
            ata = [[sum(r[i] * r[j] for r in rows) for j in cols] for i in cols]
            atb = [sum(r[i] * y for r, y in zip(rows, target, strict=True)) for i in cols]
            x = _solve(ata, atb)
            if x is None or min(x) < 0:
                continue
            coef = [0.0] * k
            for c, v in zip(cols, x, strict=True):
                coef[c] = v
            err = sum(
                (sum(c * v for c, v in zip(coef, r, strict=True)) - y) ** 2
                for r, y in zip(rows, target, strict=True)
            )
            if err < best[0]:
                best = (err, coef)
    return best[1]


@dataclass(frozen=True, slots=True)
class PhaseFit:
    """One phase's fit: integer coefficients, the stated error, the cold allowance."""

    coefficients: dict[str, int]
    """Term -> bytes per `UNIT` units, rounded up."""
    error_permille: int
    """Stated error, its relative part: this share of the point (rounded up) is added
    to it, with `error_bytes`."""
    known_bytes: int = 0
    """The model's exactly known bytes in a step of the phase (a backward's gradients),
    part of the point whatever the shape."""
    cold_extra_bytes: int = 0
    """Bytes a cold step (first of its phase in the process) measured above the warm
    prediction at the same shape: workspaces and lazily loaded kernels."""
    points: tuple[Point, ...] = ()
    validation: tuple[dict[str, int | bool | str], ...] = ()
    """Shapes measured after the fit, each: batch, seq, measured, predicted before it
    was seen, and whether that prediction covered it (or, where the device could not
    afford the step, why it was not measured)."""
    refit: bool = False
    """A validation step was not covered: the fit was made again on every measured
    step, the validation steps included, so the stated error covers them all."""
    error_bytes: int = 0
    """Stated error, its absolute part: bytes added to every prediction, whatever the
    shape (0 in a record of method 2, which had none)."""
    fresh: PhaseFit | None = None
    """A backward's second envelope (method 5): of the same shapes each measured as a
    check runs it, from no gradients. Where it predicts less than this one's sum (the
    gradients plus a step accumulating into them, which counts them twice where a small
    step peaks before they are all allocated), it bounds (`tighter`). None: a forward,
    or a record of an earlier method."""

    def point(self, batch: int, seq: int) -> dict[str, int]:
        """Each term's bytes of the step cost at the shape (rounded up)."""
        f = features(list(self.coefficients), batch, seq)
        return {t: -(-c * f[t] // UNIT) for t, c in self.coefficients.items()}

    def total(self, batch: int, seq: int) -> int:
        """The warm point estimate: the step cost and the model's known bytes."""
        return sum(self.point(batch, seq).values()) + self.known_bytes

    def error(self, point: int) -> int:
        """The stated error above a point estimate of ``point`` bytes."""
        return self.error_bytes + -(-point * self.error_permille // 1000)

    def json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "coefficients_per_1024": dict(self.coefficients),
            "error_permille": self.error_permille,
            "known_bytes": self.known_bytes,
            "cold_extra_bytes": self.cold_extra_bytes,
            "points": [p.json() for p in self.points],
            "validation": [dict(v) for v in self.validation],
            "refit": self.refit,
        }
        # Only where there is one: a record of method 2 (none) keeps its bytes and id.
        if self.error_bytes:
            d["error_bytes"] = self.error_bytes
        if self.fresh is not None:
            d["fresh"] = self.fresh.json()
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PhaseFit:
        return cls(
            coefficients={str(k): int(v) for k, v in d["coefficients_per_1024"].items()},
            error_permille=int(d["error_permille"]),
            known_bytes=int(d["known_bytes"]),
            cold_extra_bytes=int(d["cold_extra_bytes"]),
            points=tuple(
                Point(
                    int(p["batch"]),
                    int(p["seq"]),
                    int(p["measured_bytes"]),
                    bool(p.get("with_known", True)),
                )
                for p in d["points"]
            ),
            validation=tuple(dict(v) for v in d.get("validation", ())),
            refit=bool(d.get("refit", False)),
            error_bytes=int(d.get("error_bytes", 0)),
            fresh=PhaseFit.from_json(d["fresh"]) if "fresh" in d else None,
        )


def _deficits(fit: PhaseFit, points: Iterable[Point]) -> list[tuple[int, int]]:
    """``(point estimate, what the step measured above it)`` of each step it falls short of."""
    got = [(fit.total(p.batch, p.seq), p.bound(fit.known_bytes)) for p in points]
    return [(point, seen - point) for point, seen in got if seen > point]


def _error_permille(fit: PhaseFit, points: Iterable[Point]) -> int:
    """The least permille error alone (no absolute part) that puts every point on or
    under the prediction: method 2's stated error."""
    got = stated_error.alone(_deficits(fit, points))
    if got is None:
        raise ValueError("no upper envelope: the fit predicts 0 bytes where a step measured more")
    return got


def _with_error(f: PhaseFit, points: Sequence[Point], shapes: Shapes) -> PhaseFit:
    """``f`` with the stated error that covers ``points``, near the least at the reference
    shape: of ``shapes`` (the validation shapes), else of ``points``, the most tokens,
    among those the largest point (`runners.workloads.stated_error`)."""
    known = list(dict.fromkeys(shapes)) or [(p.batch, p.seq) for p in points]
    most = max((b * s for b, s in known), default=0)
    reference = max((f.total(b, s) for b, s in known if b * s == most), default=0)
    absolute, permille = stated_error.pair(_deficits(f, points), reference)
    return replace(f, error_bytes=absolute, error_permille=permille)


def _validated(f: PhaseFit) -> tuple[list[tuple[int, int]], list[Point]]:
    """The validation shapes, and the steps measured there as points (their bound)."""
    vs = [(int(v["batch"]), int(v["seq"]), v.get("measured_bytes")) for v in f.validation]
    return [(b, s) for b, s, _ in vs], [Point(b, s, int(m)) for b, s, m in vs if m is not None]


def fit(
    terms: Sequence[str],
    points: Sequence[Point],
    known_bytes: int = 0,
    reference: Shapes = (),
) -> PhaseFit:
    """The upper envelope of ``points`` on ``terms`` above ``known_bytes`` (module
    docstring); its stated error least at the reference shape among ``reference``
    (``(batch, seq)``: the validation shapes to come), else among ``points``."""
    unknown = [t for t in terms if t not in TERMS]
    if unknown:
        raise ValueError(f"unknown basis terms {unknown}; known: {', '.join(TERMS)}")
    if len({(p.batch, p.seq) for p in points}) < len(terms):
        raise ValueError(f"{len(terms)} basis terms need as many distinct shapes")
    rows: list[list[float]] = []
    target: list[float] = []
    for p in points:
        # Relative to the whole bound: a step whose cost is mostly the known bytes
        # does not pull the fit by its small remainder.
        whole = p.bound(known_bytes)
        w = 1.0 / max(whole, 1)
        f = features(terms, p.batch, p.seq)
        rows.append([f[t] * w for t in terms])
        target.append(max(0, whole - known_bytes) * w)
    coef = _nnls(rows, target)
    ints = {t: math.ceil(c * UNIT) for t, c in zip(terms, coef, strict=True)}
    if all(v == 0 for v in ints.values()) and any(
        p.bound(known_bytes) > known_bytes for p in points
    ):
        # Nothing fit: price the largest measurement as a constant (an envelope still).
        ints["constant"] = max(p.bound(known_bytes) - known_bytes for p in points) * UNIT
    bare = PhaseFit(
        coefficients=ints, error_permille=0, known_bytes=known_bytes, points=tuple(points)
    )
    return _with_error(bare, points, reference)


def widened(f: PhaseFit, seen: Point, reference: Shapes = ()) -> PhaseFit:
    """``f`` with its stated error widened (if need be) to cover ``seen`` too, which is
    recorded among its validations. Widened, the pair is chosen again over every step
    measured (near the least at ``reference`` and the validation shapes)."""
    before = predict_step(f, seen.batch, seen.seq)
    measured = seen.bound(f.known_bytes)
    check: dict[str, int | bool | str] = {"batch": seen.batch, "seq": seen.seq}
    check |= {"measured_bytes": measured, "predicted_bytes": before}
    check["covered"] = measured <= before
    g = replace(f, validation=(*f.validation, check))
    if measured <= before:
        return g
    shapes, checks = _validated(g)
    return _with_error(g, [*f.points, *checks], [*reference, *shapes])


def refit(
    f: PhaseFit,
    terms: Sequence[str],
    seen: Sequence[Point],
    reference: Shapes = (),
) -> PhaseFit:
    """``f`` fit again on its points and the validation steps ``seen`` (one of which
    it did not cover), its validations kept as they were measured."""
    g = fit(terms, [*f.points, *seen], f.known_bytes, [*reference, *_validated(f)[0]])
    return replace(g, validation=f.validation, refit=True)


def unaffordable(f: PhaseFit, batch: int, seq: int) -> PhaseFit:
    """``f`` with a validation shape the device could not afford, recorded as such."""
    return replace(
        f, validation=(*f.validation, {"batch": batch, "seq": seq, "skipped": "out of memory"})
    )


def least_at_smallest(f: PhaseFit) -> PhaseFit:
    """``f``'s stated error chosen again over every step it was fit and validated on,
    now least at the smallest of them: the fresh envelope's (`PhaseFit.fresh`), which
    bounds where a step is small; the sum, least at the largest, bounds the rest."""
    pts = list(
        {(p.batch, p.seq, p.measured_bytes): p for p in [*f.points, *_validated(f)[1]]}.values()
    )
    small = min(pts, key=lambda p: (p.batch * p.seq, p.seq))
    return _with_error(f, pts, [(small.batch, small.seq)])


def with_cold(f: PhaseFit, cold: Point) -> PhaseFit:
    """``f`` with its cold allowance: what ``cold`` measured above the warm prediction."""
    extra = max(0, cold.bound(f.known_bytes) - predict_step(f, cold.batch, cold.seq))
    return replace(f, cold_extra_bytes=extra)


def predict_step(f: PhaseFit, batch: int, seq: int) -> int:
    """The warm step's upper bound at the shape (point plus stated error)."""
    point = f.total(batch, seq)
    return point + f.error(point)


def _grid_tokens(f: PhaseFit) -> int:
    """The most tokens of a step ``f`` was fit on, its validation steps aside."""
    checks = set(_validated(f)[0])
    return max((p.batch * p.seq for p in f.points if (p.batch, p.seq) not in checks), default=0)


def tighter(f: PhaseFit, batch: int, seq: int, *, cold: bool) -> PhaseFit:
    """Of ``f`` and its fresh envelope (`PhaseFit.fresh`), the one predicting less at a
    shape within the grid's tokens (a cold step with its cold allowance): each covers
    every step it was fit and validated on, so the lesser of the two does."""
    g = f.fresh
    if g is None or batch * seq > _grid_tokens(g):
        # Beyond its grid the fresh envelope extrapolates a curve that bends up where
        # the activations outgrow the gradients (a BERT's backward at 8x128 measured 5 %
        # above it): the sum bounds there.
        return f

    def whole(x: PhaseFit) -> int:
        return predict_step(x, batch, seq) + (x.cold_extra_bytes if cold else 0)

    return g if whole(g) < whole(f) else f
