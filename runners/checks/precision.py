"""Judging a candidate against the precision its base runs in.

A low-precision run differs from the exact result by its rounding; a second
run of the same code with deterministic kernels repeats that rounding bit for
bit, so a repeat alone measures a noise floor of zero and any change at all
(a kernel swap that only moves rounding) would fail. Instead the base runs once
more in a reference precision (float32 for a bf16/fp16 workload, float64 for a
float32 one) and both low-precision arms are measured against it:

- the *precision floor* of a tensor is ``err(base, ref)``: how far the base's
  own precision takes it from the reference;
- the *repeat-noise floor* (when the base also ran twice) is
  ``err(base_repeat, base)``: the nondeterminism the workload allows;
- the larger of the two governs (the receipt says which), and the candidate
  passes a tensor when ``err(candidate, ref) <= k * floor + atol``.

A change smaller than the low precision's own rounding (a 1 % scale on one
expert's output, in bf16) passes that rule: it is below what the precision can
resolve. So the candidate runs in the reference precision too (the *function*
part): ``err(candidate_ref, ref)`` compares the two codes where rounding is
small, and must stay within ``k * err(base, ref) * u_ref / u_low +
function_atol`` (the precision floor scaled down by the ratio of the two
precisions' unit roundoffs, plus an allowance of a few hundred reference
roundoffs for summation order). A tensor fails when either part does.

``err`` is the relative L2 ``||x - ref|| / ||ref||``. A tensor whose floor is
not finite (the reference is zero where the base is not, or a figure is NaN)
cannot be judged: ``inconclusive``. Per family (`noise.family`) the worst
tensor is the one nearest to or furthest beyond its allowance; a family fails
when any of its tensors does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from runners.checks.noise import FamilyState, family
from runners.contract.result import Json

Floor = Literal["precision", "repeat-noise"]

REFERENCE_DTYPES = ("float32", "float64")
"""Reference precisions a check may ask for."""

_BITS = {"bfloat16": 8, "float16": 11, "half": 11, "float32": 24, "float64": 53}
"""Significand bits of each float dtype: which precision is higher."""


def reference_dtype_for(dtype: str, explicit: str | None) -> str:
    """The reference precision for a workload running in ``dtype``: ``explicit`` when
    given, else float32 for 16-bit floats and float64 otherwise."""
    if explicit is not None:
        return explicit
    return "float32" if _BITS.get(dtype, 24) < 24 else "float64"


def higher(reference: str, dtype: str) -> bool:
    """Whether ``reference`` carries more significand bits than ``dtype``."""
    return _BITS.get(reference, 0) > _BITS.get(dtype, 53)


def roundoff_ratio(reference: str, dtype: str) -> float:
    """``u_reference / u_dtype``: the unit roundoffs' ratio (2**-16 for float32 over
    bfloat16)."""
    return float(2.0 ** (_BITS.get(dtype, 24) - _BITS.get(reference, 53)))


FUNCTION_ATOL_ROUNDOFFS = 1024
"""Default function allowance in units of the reference's roundoff: 6.1e-5 for float32,
1.1e-13 for float64 (summation-order differences stay orders of magnitude below)."""


def function_atol_for(reference: str, explicit: float | None) -> float:
    """The function part's absolute allowance: ``explicit`` or the default."""
    if explicit is not None:
        return explicit
    return float(FUNCTION_ATOL_ROUNDOFFS * 2.0 ** -_BITS.get(reference, 53))


@dataclass(frozen=True, slots=True)
class TensorVerdict:
    """One tensor judged by the rule (module docstring)."""

    name: str
    err_candidate: float | None
    """``err(candidate, ref)``; None when not finite."""
    err_base: float | None
    """``err(base, ref)``: the precision floor; None when not finite."""
    noise: float | None
    """``err(base_repeat, base)``: the repeat-noise floor; None without a repeat."""
    k: float
    atol: float
    err_function: float | None = None
    """``err(candidate_ref, ref)``: both codes in the reference precision; None when not
    finite or not run (`function_ran`)."""
    function_ran: bool = False
    function_scale: float = 0.0
    """``u_ref / u_low``: the precision floor scaled to the reference precision."""
    function_atol: float = 0.0

    @property
    def floor(self) -> float | None:
        if self.err_base is None:
            return None
        return max(self.err_base, self.noise or 0.0)

    @property
    def floor_from(self) -> Floor:
        return "repeat-noise" if (self.noise or 0.0) > (self.err_base or 0.0) else "precision"

    @property
    def allowed(self) -> float | None:
        f = self.floor
        return None if f is None or not math.isfinite(f) else self.k * f + self.atol

    @property
    def multiple(self) -> float | None:
        """``err(candidate, ref)`` in units of the governing floor (None: floor zero)."""
        f, c = self.floor, self.err_candidate
        if c is None or f is None or not math.isfinite(f) or f == 0:
            return None
        return c / f

    @property
    def function_allowed(self) -> float | None:
        if not self.function_ran or self.err_base is None or not math.isfinite(self.err_base):
            return None
        return self.k * self.err_base * self.function_scale + self.function_atol

    @property
    def precision_state(self) -> FamilyState:
        c, allowed = self.err_candidate, self.allowed
        if c is None or (math.isinf(c) and allowed is not None):
            return "failed"
        if allowed is None:
            return "inconclusive"
        return "passed" if c <= allowed else "failed"

    @property
    def function_state(self) -> FamilyState | None:
        """The function part's state; None when it did not run."""
        if not self.function_ran:
            return None
        f, allowed = self.err_function, self.function_allowed
        if f is None:
            return "failed"
        if allowed is None:
            return "inconclusive"
        return "passed" if f <= allowed else "failed"

    @property
    def state(self) -> FamilyState:
        states = {self.precision_state, self.function_state}
        if "failed" in states:
            return "failed"
        return "inconclusive" if "inconclusive" in states else "passed"

    @property
    def failed_by(self) -> list[str]:
        """Which parts the tensor failed: ``precision``, ``function``."""
        out = ["precision"] if self.precision_state == "failed" else []
        return out + (["function"] if self.function_state == "failed" else [])

    @property
    def badness(self) -> float:
        """The larger of each part's error over its allowance: above 1 is beyond the rule."""
        parts = [(self.err_candidate, self.allowed)]
        if self.function_ran:
            parts.append((self.err_function, self.function_allowed))
        worst = -1.0  # inconclusive: after every judged tensor
        for err, allowed in parts:
            if err is None:
                return math.inf
            if allowed is not None:
                worst = max(worst, err / allowed if allowed > 0 else (math.inf if err else 0.0))
        return worst

    def to_json(self) -> dict[str, Json]:
        return {
            "name": self.name,
            "err_candidate": _finite(self.err_candidate),
            "err_base": _finite(self.err_base),
            "noise": self.noise,
            "floor": _finite(self.floor),
            "floor_from": self.floor_from,
            "allowed": self.allowed,
            "multiple": self.multiple,
            "err_function": _finite(self.err_function) if self.function_ran else None,
            "function_allowed": self.function_allowed,
            "state": self.state,
            "failed_by": self.failed_by,  # type: ignore[dict-item]
        }


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


@dataclass(frozen=True, slots=True)
class Function:
    """The function part's inputs: ``err(candidate_ref, ref)`` per tensor, the roundoff
    ratio and the absolute allowance."""

    errors: Mapping[str, float | None]
    scale: float
    atol: float


def judge(
    cand: Mapping[str, float | None],
    base: Mapping[str, float | None],
    noise: Mapping[str, float | None],
    k: float,
    atol: float,
    function: Function | None = None,
) -> list[TensorVerdict]:
    """Each tensor of ``cand`` (sorted), from its errors against the reference."""
    return [
        TensorVerdict(
            n,
            cand[n],
            base.get(n),
            noise.get(n) if noise else None,
            k,
            atol,
            err_function=function.errors.get(n) if function else None,
            function_ran=function is not None,
            function_scale=function.scale if function else 0.0,
            function_atol=function.atol if function else 0.0,
        )
        for n in sorted(cand)
    ]


@dataclass(frozen=True, slots=True)
class FamilyVerdict:
    family: str
    tensors: list[TensorVerdict]

    @property
    def worst(self) -> TensorVerdict:
        return max(self.tensors, key=lambda t: t.badness)

    @property
    def state(self) -> FamilyState:
        states = {t.state for t in self.tensors}
        if "failed" in states:
            return "failed"
        return "inconclusive" if "inconclusive" in states else "passed"

    def to_json(self) -> dict[str, Json]:
        w = self.worst
        return {
            "family": self.family,
            "tensors": len(self.tensors),
            "worst": w.name,
            "err_candidate": _finite(w.err_candidate),
            "err_base": _finite(w.err_base),
            "noise": w.noise,
            "floor_from": w.floor_from,
            "multiple": w.multiple,
            "allowed": w.allowed,
            "err_function": _finite(w.err_function) if w.function_ran else None,
            "function_allowed": w.function_allowed,
            "failed_by": w.failed_by,  # type: ignore[dict-item]
            "beyond_rule": sum(t.state == "failed" for t in self.tensors),
            "state": self.state,
        }


def by_family(rows: list[TensorVerdict]) -> list[FamilyVerdict]:
    """The tensors grouped by family (sorted by family name)."""
    fams: dict[str, list[TensorVerdict]] = {}
    for t in rows:
        fams.setdefault(family(t.name), []).append(t)
    return [FamilyVerdict(f, ts) for f, ts in sorted(fams.items())]


def describe(t: TensorVerdict) -> str:
    """``name err 0.0031 vs floor 5.8e-07 (precision), 5300x`` for a reason sentence,
    with the function part's figures when that part failed."""
    mult = f", {t.multiple:.3g}x" if t.multiple is not None else ""
    floor = "n/a" if t.floor is None else f"{t.floor:.3g}"
    err = "non-finite" if t.err_candidate is None else f"{t.err_candidate:.3g}"
    out = f"{t.name} err {err} vs floor {floor} ({t.floor_from}){mult}"
    if "function" in t.failed_by:
        f = "non-finite" if t.err_function is None else f"{t.err_function:.3g}"
        allowed = "n/a" if t.function_allowed is None else f"{t.function_allowed:.3g}"
        out += f"; in the reference precision err {f} > allowed {allowed}"
    return out
