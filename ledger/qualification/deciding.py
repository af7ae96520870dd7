"""The one figure that decides a receipt, with its bound: what its findings lead with,
what its reason and badge speak of, and the series its trend follows (`deciding_of`).
Every surface prints it one way (`Deciding.text`). It sits beside the judge so that the
verdict decides it once per claim (`ClaimVerdict.deciding`); a surface that shows one
receipt without a verdict calls `deciding_of` itself.

The rule is general: a receipt whose measurements name their deciding figure
(``measurements.deciding``: ``key``, ``name``, ``value``, ``bound``, ``unit``,
``direction``) is read as it says; otherwise the figure is derived from what each
check records: admission's least measured/predicted where the estimate was failed
for looseness (below the plan's ``min_measured_over_predicted``), else its worst
against 1; regression-24view's worst repeat difference against ``pooled_atol``;
gradient-compare's worst error over its floor; else the claim process's peak bytes
(no bound)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ledger.qualification.figures import Figure, figure_of, least_of

__all__ = ["KEYS", "Deciding", "bound_of", "deciding_of", "figure_by_key"]

Direction = Literal["max", "min"]

KEYS: dict[str, str] = {
    "worst-ratio": "worst measured/predicted",
    "least-ratio": "least measured/predicted",
    "repeat-difference": "worst repeat difference",
    "error-over-floor": "worst error over its floor",
    "peak-bytes": "peak bytes",
}
"""The series a trend can follow, by key (`/trend?figure=KEY`, `ledger trend`)."""


@dataclass(frozen=True)
class Deciding:
    key: str
    """The series it belongs to (`KEYS`)."""
    figure: Figure
    bound: float | None
    """The bound it is judged against (None: the check records none)."""
    direction: Direction
    """``max``: the figure must stay at or under its bound; ``min``: at or above it."""

    @property
    def past(self) -> bool | None:
        """Past its bound (None: no bound)."""
        if self.bound is None:
            return None
        v = self.figure.value
        return v > self.bound if self.direction == "max" else v < self.bound

    @property
    def bound_text(self) -> str:
        if self.bound is None:
            return ""
        return Figure(self.figure.name, self.bound, self.figure.unit).text

    @property
    def text(self) -> str:
        """`least measured/predicted 0.0147x < bound 0.25x`: the one way every surface
        prints it (the figure alone where no bound is recorded)."""
        said = f"{self.figure.name} {self.figure.text}"
        if self.bound is None:
            return said
        past = self.past
        op = {("max", True): ">", ("max", False): "≤", ("min", True): "<", ("min", False): "≥"}
        return f"{said} {op[(self.direction, bool(past))]} bound {self.bound_text}"

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            **self.figure.to_json(),
            "bound": self.bound,
            "direction": self.direction,
            "past": self.past,
            "said": self.text,
        }


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _param(v: Any) -> float | None:
    """A check parameter as a number: another harness attests its parameters as text
    (`ledger attest --param min_measured_over_predicted=0.25`)."""
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return _num(v)


def _named(m: dict[str, Any]) -> Deciding | None:
    """What the measurements say decided them, where they say it."""
    d = m.get("deciding")
    if not isinstance(d, dict):
        return None
    value, unit = _num(d.get("value")), d.get("unit", "ratio")
    if value is None or unit not in ("bytes", "ratio", "number"):
        return None
    key = str(d.get("key") or d.get("name") or "figure")
    direction: Direction = "min" if d.get("direction") == "min" else "max"
    name = str(d.get("name") or KEYS.get(key, key))
    return Deciding(key, Figure(name, value, unit), _num(d.get("bound")), direction)


def _repeat(m: dict[str, Any]) -> float | None:
    """regression-24view's worst difference between its two runs over its outputs."""
    found = [
        v
        for o in (m.get("outputs") or [])
        if isinstance(o, dict) and (v := _num(o.get("max_abs_diff"))) is not None
    ]
    if found:
        return max(found)
    return _num(m.get("pooled_max_abs_diff"))


def figure_by_key(predicate: dict[str, Any], key: str) -> Figure | None:
    """One receipt's figure of the series ``key`` (`KEYS`), or None where it records
    none: the points of a trend that follows that figure."""
    m = predicate.get("measurements") or {}
    if not isinstance(m, dict):
        return None
    named = _named(m)
    if named is not None and named.key == key:
        return named.figure
    check = str((predicate.get("check") or {}).get("name", ""))
    if key == "least-ratio":
        return least_of(predicate)
    if key == "repeat-difference":
        if check != "regression-24view":
            return None
        v = _repeat(m)
        return None if v is None else Figure(KEYS[key], v, "number")
    if key == "peak-bytes":
        # The peak whatever else the check records (admission's and gradients' too).
        for k in ("process_peak_bytes", "outside_peak_bytes"):
            if (peak := _num(m.get(k))) is not None:
                return Figure(KEYS[key], peak, "bytes")
        return None
    f = figure_of(predicate)
    return f if f is not None and f.name == KEYS.get(key) else None


def bound_of(predicate: dict[str, Any], key: str) -> float | None:
    """The bound one receipt's figure of the series ``key`` is judged against, as its
    check's parameters say (None: none is recorded)."""
    m = predicate.get("measurements") or {}
    named = _named(m) if isinstance(m, dict) else None
    if named is not None and named.key == key:
        return named.bound
    params = (predicate.get("check") or {}).get("parameters") or {}
    params = params if isinstance(params, dict) else {}
    if key == "least-ratio":
        return _param(params.get("min_measured_over_predicted"))
    if key == "worst-ratio":
        return 1.0
    if key == "repeat-difference":
        atol = _param(params.get("pooled_atol"))
        return atol if atol is not None else 0.0
    return None


def deciding_of(predicate: dict[str, Any]) -> Deciding | None:
    """The figure that decides one receipt (its predicate as JSON), with its bound."""
    m = predicate.get("measurements") or {}
    if not isinstance(m, dict):
        return None
    named = _named(m)
    if named is not None:
        return named
    check = str((predicate.get("check") or {}).get("name", ""))
    params = (predicate.get("check") or {}).get("parameters") or {}
    params = params if isinstance(params, dict) else {}
    if check == "admission":
        worst = figure_by_key(predicate, "worst-ratio")
        least = least_of(predicate)
        floor = _param(params.get("min_measured_over_predicted"))
        safe = worst is None or worst.value <= 1
        if least is not None and floor is not None and least.value < floor and safe:
            # Failed for looseness: the least ratio decided it, not the worst.
            return Deciding("least-ratio", least, floor, "min")
        if worst is not None:
            return Deciding("worst-ratio", worst, 1.0, "max")
    if check == "regression-24view":
        diff = figure_by_key(predicate, "repeat-difference")
        if diff is not None:
            atol = _param(params.get("pooled_atol"))
            return Deciding("repeat-difference", diff, atol if atol is not None else 0.0, "max")
    f = figure_of(predicate)
    if f is None:
        return None
    key = next((k for k, name in KEYS.items() if name == f.name), "peak-bytes")
    return Deciding(key, f, None, "max")
