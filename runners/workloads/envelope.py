"""The built-in estimator's fit: an upper envelope over measured step costs.

A step's peak increment is modelled per phase as the exactly known bytes of the
model (the gradients a backward allocates, `ModelBytes`) plus a step cost that is
a non-negative combination of named basis terms of the shape. The step cost is
measured with the gradients already allocated (a backward accumulating into them),
so a peak of activations hidden under the gradients at small shapes is still
seen, and the sum bounds a step that allocates its gradients afresh:

- ``constant``: 1 (what every step allocates whatever its size);
- ``sequences``: ``batch`` (what each sequence adds whatever its length: a pooled
  row, a per-row loss, a mask's rows);
- ``tokens``: ``batch * seq`` (activations, logits, routed rows);
- ``attention``: ``batch * seq**2``, where attention scores are materialised.

The coefficients are fit by non-negative least squares on residuals relative to
the measured increment (so small shapes weigh as much as large ones), giving the
*point* estimate; the stated error is the largest relative residual over the
measured shapes, so the returned prediction (point plus error) lies on or above
every measured point: an upper envelope, not a line through the middle.
Coefficients are stored as exact integers (bytes per 1024 units, rounded up) and
the error in permille (rounded up), so the record signs integers and every
prediction is recomputed exactly.

Imports nothing heavy: the fit is small linear algebra in Python, readable and
checkable without torch.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

VERSION = "2"
"""The built-in estimator's method: a calibration recorded under another is refit (2:
seven grid steps a phase, `runners.adapt.calibrate.GRID`; 1: fourteen)."""

TERMS = ("constant", "sequences", "tokens", "attention")
"""Every basis term the method knows, in order."""

UNIT = 1024
"""Coefficients are bytes per `UNIT` units of their term, rounded up."""


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
    """Stated error: the prediction is the point plus this share of it."""
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

    def point(self, batch: int, seq: int) -> dict[str, int]:
        """Each term's bytes of the step cost at the shape (rounded up)."""
        f = features(list(self.coefficients), batch, seq)
        return {t: -(-c * f[t] // UNIT) for t, c in self.coefficients.items()}

    def total(self, batch: int, seq: int) -> int:
        """The warm point estimate: the step cost and the model's known bytes."""
        return sum(self.point(batch, seq).values()) + self.known_bytes

    def error(self, point: int) -> int:
        return -(-point * self.error_permille // 1000)

    def json(self) -> dict[str, Any]:
        return {
            "coefficients_per_1024": dict(self.coefficients),
            "error_permille": self.error_permille,
            "known_bytes": self.known_bytes,
            "cold_extra_bytes": self.cold_extra_bytes,
            "points": [p.json() for p in self.points],
            "validation": [dict(v) for v in self.validation],
            "refit": self.refit,
        }

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
        )


def _error_permille(fit: PhaseFit, points: Iterable[Point]) -> int:
    """The least permille error that puts every point on or under the prediction."""
    worst = 0
    for p in points:
        point = fit.total(p.batch, p.seq)
        seen = p.bound(fit.known_bytes)
        if seen <= point:
            continue
        if point <= 0:
            raise ValueError(
                f"no upper envelope: the fit predicts {point} bytes at {p.batch}x{p.seq}, "
                f"measured {seen}"
            )
        need = -(-(seen - point) * 1000 // point)
        # Rounding the error up may still fall short by a byte: step until it covers.
        while point + -(-point * need // 1000) < seen:
            need += 1
        worst = max(worst, need)
    return worst


def fit(terms: Sequence[str], points: Sequence[Point], known_bytes: int = 0) -> PhaseFit:
    """The upper envelope of ``points`` on ``terms`` above ``known_bytes`` (module
    docstring)."""
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
    bare = PhaseFit(coefficients=ints, error_permille=0, known_bytes=known_bytes)
    return PhaseFit(
        coefficients=ints,
        error_permille=_error_permille(bare, points),
        known_bytes=known_bytes,
        points=tuple(points),
    )


def widened(f: PhaseFit, seen: Point) -> PhaseFit:
    """``f`` with its stated error widened (if need be) to cover ``seen`` too, which is
    recorded among its validations."""
    before = predict_step(f, seen.batch, seen.seq)
    err = max(f.error_permille, _error_permille(f, [seen]))
    return PhaseFit(
        coefficients=f.coefficients,
        error_permille=err,
        known_bytes=f.known_bytes,
        cold_extra_bytes=f.cold_extra_bytes,
        points=f.points,
        validation=(
            *f.validation,
            {
                "batch": seen.batch,
                "seq": seen.seq,
                "measured_bytes": seen.bound(f.known_bytes),
                "predicted_bytes": before,
                "covered": err == f.error_permille,
            },
        ),
    )


def refit(f: PhaseFit, terms: Sequence[str], seen: Sequence[Point]) -> PhaseFit:
    """``f`` fit again on its points and the validation steps ``seen`` (one of which
    it did not cover), its validations kept as they were measured."""
    g = fit(terms, [*f.points, *seen], f.known_bytes)
    return PhaseFit(
        coefficients=g.coefficients,
        error_permille=g.error_permille,
        known_bytes=f.known_bytes,
        points=g.points,
        validation=f.validation,
        refit=True,
    )


def unaffordable(f: PhaseFit, batch: int, seq: int) -> PhaseFit:
    """``f`` with a validation shape the device could not afford, recorded as such."""
    return PhaseFit(
        coefficients=f.coefficients,
        error_permille=f.error_permille,
        known_bytes=f.known_bytes,
        cold_extra_bytes=f.cold_extra_bytes,
        points=f.points,
        validation=(*f.validation, {"batch": batch, "seq": seq, "skipped": "out of memory"}),
    )


def with_cold(f: PhaseFit, cold: Point) -> PhaseFit:
    """``f`` with its cold allowance: what ``cold`` measured above the warm prediction."""
    extra = max(0, cold.bound(f.known_bytes) - predict_step(f, cold.batch, cold.seq))
    return PhaseFit(
        coefficients=f.coefficients,
        error_permille=f.error_permille,
        known_bytes=f.known_bytes,
        cold_extra_bytes=extra,
        points=f.points,
        validation=f.validation,
        refit=f.refit,
    )


def predict_step(f: PhaseFit, batch: int, seq: int) -> int:
    """The warm step's upper bound at the shape (point plus stated error)."""
    point = f.total(batch, seq)
    return point + f.error(point)


@dataclass(frozen=True, slots=True)
class ModelBytes:
    """What the model is, in exact bytes, read from the built model."""

    parameters: dict[str, int]
    """``trainable.<dtype>`` / ``frozen.<dtype>`` -> bytes."""
    trainable_bytes: int
    frozen_bytes: int
    gradient_bytes: int
    """What a backward allocates for the gradients of the trainable parameters."""
    optimizer_state_bytes: int
    """What the optimizer keeps per trainable parameter (Adam: two moments and a step)."""

    def json(self) -> dict[str, Any]:
        return {
            "parameters": dict(self.parameters),
            "trainable_bytes": self.trainable_bytes,
            "frozen_bytes": self.frozen_bytes,
            "gradient_bytes": self.gradient_bytes,
            "optimizer_state_bytes": self.optimizer_state_bytes,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ModelBytes:
        return cls(
            parameters={str(k): int(v) for k, v in d["parameters"].items()},
            trainable_bytes=int(d["trainable_bytes"]),
            frozen_bytes=int(d["frozen_bytes"]),
            gradient_bytes=int(d["gradient_bytes"]),
            optimizer_state_bytes=int(d["optimizer_state_bytes"]),
        )


PHASE_NAMES = ("forward_nograd", "forward_backward")


@dataclass(frozen=True, slots=True)
class Calibration:
    """A workload's fit on one device: what `estimate` predicts from."""

    workload_digest: str
    device: str
    """The device it was measured on (kind, model, memory), as a key."""
    terms: tuple[str, ...]
    model: ModelBytes
    phases: dict[str, PhaseFit]
    measured_up_to_tokens: int
    """The stated error holds for shapes up to this many tokens; beyond, extrapolated."""
    routing: dict[str, Any] = field(default_factory=dict)
    """A mixture of experts: its routers, whether they were forced to the worst routing
    while measuring (``forced``), and per phase the share of the validation shape's
    bound that routing costs (``share_permille``: worst less the routers' own choice).
    Empty: no routers."""
    version: str = VERSION

    def json(self) -> dict[str, Any]:
        return {
            "method": "ledger.builtin-envelope",
            "version": self.version,
            "workload_digest": self.workload_digest,
            "device": self.device,
            "terms": list(self.terms),
            "model": self.model.json(),
            "phases": {k: v.json() for k, v in sorted(self.phases.items())},
            "measured_up_to_tokens": self.measured_up_to_tokens,
            "routing": dict(self.routing),
        }

    @property
    def id(self) -> str:
        """``sha256:<hex>`` of the record's canonical JSON: what admission rows name."""
        body = json.dumps(self.json(), sort_keys=True, separators=(",", ":")).encode()
        return "sha256:" + hashlib.sha256(body).hexdigest()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Calibration:
        if d.get("method") != "ledger.builtin-envelope":
            raise ValueError("not a built-in estimator calibration")
        return cls(
            workload_digest=str(d["workload_digest"]),
            device=str(d["device"]),
            terms=tuple(str(t) for t in d["terms"]),
            model=ModelBytes.from_json(d["model"]),
            phases={str(k): PhaseFit.from_json(v) for k, v in d["phases"].items()},
            measured_up_to_tokens=int(d["measured_up_to_tokens"]),
            routing=dict(d.get("routing", {})),
            version=str(d["version"]),
        )

    def estimate(
        self, batch: int, seq: int, phase: str, *, cold: bool
    ) -> tuple[int, int, dict[str, int]]:
        """(predicted upper bound, point estimate, terms summing to the bound)."""
        f = self.phases[phase]
        terms = {f"step.{t}": v for t, v in f.point(batch, seq).items()}
        if f.known_bytes:
            terms["model.gradients"] = f.known_bytes
        terms["stated_error"] = f.error(f.total(batch, seq))
        if cold and f.cold_extra_bytes:
            terms["cold"] = f.cold_extra_bytes
        predicted = sum(terms.values())
        return predicted, predicted - terms["stated_error"], terms
