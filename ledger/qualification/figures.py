"""The one figure a receipt's check records that a trend follows: admission's
worst measured/predicted ratio, gradient-compare's worst error over its floor,
else the claim process's peak bytes; and how a trend says a scope and a change
in % (`scope_text`, `percent_text`: the text helpers the trend reads, kept here so
that series.py stays below the read side). Beside the judge, so that the verdict
carries each claim's deciding figure (`deciding.py`) and the trend, a layer above,
follows the same figures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ledger.units.numbers import iec, is_digest, number, short_digest

__all__ = ["Figure", "figure_of", "least_of", "percent_text", "scope_text"]


@dataclass(frozen=True)
class Figure:
    name: str
    """What the figure is, in words (`worst measured/predicted`)."""
    value: float
    unit: Literal["bytes", "ratio", "number"]
    """``number``: a plain figure (a difference between two runs), said as it is."""

    @property
    def text(self) -> str:
        """For people: `2.58 GiB`, `1.07x`, `0.0312`."""
        if self.unit == "bytes":
            return iec(self.value)
        return number(self.value) if self.unit == "number" else f"{number(self.value)}x"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "unit": self.unit, "text": self.text}


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _rows(m: dict[str, Any], key: str) -> list[dict[str, Any]]:
    rows = m.get(key)
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def _most(values: list[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return max(found) if found else None


def figure_of(predicate: dict[str, Any]) -> Figure | None:
    """The figure of one receipt's predicate, or None where it records none."""
    check = str((predicate.get("check") or {}).get("name", ""))
    m = predicate.get("measurements") or {}
    if not isinstance(m, dict):
        return None
    if check == "admission":
        ratio = _num(m.get("max_measured_over_predicted"))
        if ratio is None:
            ratio = _most([_num(r.get("measured_over_predicted")) for r in _rows(m, "shapes")])
        if ratio is not None:
            return Figure("worst measured/predicted", ratio, "ratio")
    if check == "gradient-compare":
        multiple = _most([_num(r.get("multiple")) for r in _rows(m, "tensors")])
        if multiple is None:
            rel, floor = _num(m.get("max_rel_l2")), _num(m.get("max_noise_rel_l2"))
            multiple = rel / floor if rel is not None and floor else None
        if multiple is not None:
            return Figure("worst error over its floor", multiple, "ratio")
    for key in ("process_peak_bytes", "outside_peak_bytes"):
        peak = _num(m.get(key))
        if peak is not None:
            return Figure("peak bytes", peak, "bytes")
    peak = _most([_num(r.get("measured_bytes")) for r in _rows(m, "shapes")])
    return Figure("peak bytes", peak, "bytes") if peak is not None else None


def least_of(predicate: dict[str, Any]) -> Figure | None:
    """Admission's least measured/predicted over its admitted steps (how loose the
    estimate is where it was loosest), or None for other checks and where no admitted
    step was measured. Receipts made before the figure was recorded give it from their
    rows, so a base measured then still compares with a head measured now."""
    check = str((predicate.get("check") or {}).get("name", ""))
    m = predicate.get("measurements") or {}
    if check != "admission" or not isinstance(m, dict):
        return None
    least = _num(m.get("min_measured_over_predicted"))
    if least is None:
        found = [
            v
            for r in _rows(m, "shapes")
            if r.get("admitted") is True
            and (v := _num(r.get("measured_over_predicted"))) is not None
        ]
        least = min(found) if found else None
    return None if least is None else Figure("least measured/predicted", least, "ratio")


def scope_text(scope: dict[str, Any]) -> str:
    """`device_kind=cuda, gpu_model=NVIDIA H200` (digests shortened); `any environment`
    for a receipt that names no scope."""
    said = [f"{k}={short_digest(v) if is_digest(v) else v}" for k, v in sorted(scope.items())]
    return ", ".join(said) or "any environment"


def percent_text(percent: float) -> str:
    """`+12.3 %`, `-99.9 %`, `±0 %`: three significant digits, the sign always shown."""
    if percent == 0:
        return "±0 %"
    return f"{'+' if percent > 0 else '-'}{number(abs(percent))} %"
