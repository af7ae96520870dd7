"""What admission receipts say about a workload's estimator (`ledger calibrate`).

Read from the rows an admission receipt records per attempt (shape, phase,
cold or warm run, predicted and measured bytes, admitted or refused), and
from the records of imported planner reports (`ledger import
admission-events`: phase, predicted and observed peak, decision): per
shape and phase the measured/predicted ratios, the worst ratio, how many
admitted steps went over their prediction, how many refusals were
over-refusals (the step, run anyway, fit), and which shapes carry no
measurement at all. It reports; it never fits a coefficient.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class ShapeFigures:
    shape: str
    phase: str
    runs: int = 0
    measured: int = 0
    ratios: list[float] = field(default_factory=list)
    cold_ratios: list[float] = field(default_factory=list)
    admitted_over_prediction: int = 0
    refused: int = 0
    over_refused: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "phase": self.phase,
            "runs": self.runs,
            "measured_runs": self.measured,
            "min_ratio": min(self.ratios, default=None),
            "max_ratio": max(self.ratios, default=None),
            "cold_max_ratio": max(self.cold_ratios, default=None),
            "admitted_over_prediction": self.admitted_over_prediction,
            "refused": self.refused,
            "over_refused": self.over_refused,
        }


IMPORTED_SHAPE = "imported"
"""The shape column of rows from imported planner reports (they name no shape)."""


def _rows(pred: Mapping[str, Any]) -> list[Any] | None:
    """The attempts an admission receipt records: `qualify`'s rows as they are, an
    imported planner report's records as rows (phase, predicted and observed peak,
    admitted or refused); None for any other receipt."""
    check = pred.get("check", {}).get("name")
    m = pred.get("measurements", {})
    if check == "admission":
        rows = m.get("shapes")
        return rows if isinstance(rows, list) else None
    if check != "import-admission-events" or not isinstance(m.get("records"), list):
        return None
    return [
        {
            "shape": IMPORTED_SHAPE,
            "phase": r.get("phase"),
            "predicted_bytes": r.get("predicted_peak_bytes"),
            "measured_bytes": r.get("observed_peak_bytes"),
            "admitted": r.get("decision") != "refused" and r.get("event") != "admission_refused",
        }
        for r in m["records"]
        if isinstance(r, dict) and r.get("event") != "planning_error"
    ]


def calibrate(receipts: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """The calibration report over ``(receipt id, predicate)`` pairs of admission
    receipts (other checks are left out and counted)."""
    figures: dict[tuple[str, str], ShapeFigures] = {}
    used: list[str] = []
    skipped = 0
    for rid, pred in receipts:
        rows = _rows(pred)
        if rows is None:
            skipped += 1
            continue
        used.append(rid)
        for row in rows:
            if not isinstance(row, dict):
                continue
            key = (str(row.get("shape")), str(row.get("phase")))
            f = figures.setdefault(key, ShapeFigures(*key))
            f.runs += 1
            measured, predicted = row.get("measured_bytes"), row.get("predicted_bytes")
            admitted = row.get("admitted") is True
            if not admitted:
                f.refused += 1
                f.over_refused += row.get("over_refused") is True
            if isinstance(measured, int) and isinstance(predicted, int) and predicted > 0:
                f.measured += 1
                ratio = measured / predicted
                f.ratios.append(ratio)
                if row.get("cold") is True:
                    f.cold_ratios.append(ratio)
                f.admitted_over_prediction += admitted and measured > predicted
    rows_out = [f.to_json() for _, f in sorted(figures.items())]
    worst = max(
        (r for r in rows_out if r["max_ratio"] is not None),
        key=lambda r: r["max_ratio"],
        default=None,
    )
    return {
        "receipts": used,
        "receipts_not_admission": skipped,
        "shapes": rows_out,
        "worst_ratio": None if worst is None else worst["max_ratio"],
        "worst_at": None if worst is None else f"{worst['shape']} {worst['phase']}",
        "admitted_over_prediction": sum(r["admitted_over_prediction"] for r in rows_out),
        "over_refused": sum(r["over_refused"] for r in rows_out),
        "unmeasured": [f"{r['shape']} {r['phase']}" for r in rows_out if not r["measured_runs"]],
    }


def render(doc: Mapping[str, Any]) -> str:
    """The report as text: one line per shape and phase, then the totals."""
    lines = [f"{'shape':>12} {'phase':<17} {'runs':>4} {'ratio min..max':>16} {'cold':>6} note"]

    def r(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    for s in doc["shapes"]:
        notes = []
        if s["admitted_over_prediction"]:
            notes.append(f"{s['admitted_over_prediction']} admitted over prediction")
        if s["over_refused"]:
            notes.append(f"{s['over_refused']} over-refused")
        if not s["measured_runs"]:
            notes.append("no measurement")
        span = f"{r(s['min_ratio'])}..{r(s['max_ratio'])}"
        lines.append(
            f"{s['shape']:>12} {s['phase']:<17} {s['runs']:>4} {span:>16} "
            f"{r(s['cold_max_ratio']):>6} {'; '.join(notes)}".rstrip()
        )
    lines.append(
        f"worst measured/predicted: {r(doc['worst_ratio'])} ({doc['worst_at'] or 'none'}); "
        f"admitted over prediction: {doc['admitted_over_prediction']}; "
        f"over-refused: {doc['over_refused']}; "
        f"without a measurement: {', '.join(doc['unmeasured']) or 'none'}"
    )
    lines.append(f"from {len(doc['receipts'])} admission receipt(s)")
    return "\n".join(lines) + "\n"
