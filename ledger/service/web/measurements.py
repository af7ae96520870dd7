"""A receipt's measurements as the receipt page shows them: each table (its judging
columns first, the first rows shown, the rest folded), the scalars flattened, the
worst predicted/measured ratio, and the predicted vs measured charts per phase."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ledger.read import humanize
from ledger.service.web import charts

__all__ = ["cell", "flat", "measurement_charts", "measurement_tables"]


def measurement_charts(measurements: dict[str, Any]) -> list[str]:
    """Predicted vs measured bytes per shape, one chart per phase; refusals and
    counterexamples marked."""
    rows = measurements.get("shapes")
    if not isinstance(rows, list):
        return []
    phases: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if isinstance(r, dict) and "shape" in r and r.get("run", "first") == "first":
            phases[str(r.get("phase", "step"))].append(r)
    out = []
    for phase, rs in phases.items():

        def num(v: Any) -> float | None:
            return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

        marks = []
        for r in rs:
            if r.get("counterexample"):
                marks.append("counterexample")
            elif r.get("admitted") is False or r.get("status") == "refused":
                marks.append("refused")
            else:
                marks.append("")
        out.append(
            charts.bars(
                f"{phase}: predicted vs measured bytes per shape",
                [str(r["shape"]) for r in rs],
                {
                    "predicted": [num(r.get("predicted_bytes")) for r in rs],
                    "measured": [num(r.get("measured_bytes")) for r in rs],
                },
                marks=marks,
                x_label="shape (batch x sequence)",
                y_label="bytes",
            )
        )
    return out


# Scalars a reviewer reads first, per check: the verdict figures.
_KEY_SCALARS: dict[str, tuple[str, ...]] = {
    "admission": (
        "counterexample_count",
        "admitted_count",
        "refused_count",
        "over_refused_count",
        "max_measured_over_predicted",
        "min_measured_over_predicted",
        "attempts",
    ),
    "gradient-compare": (
        "rule",
        "tensors_beyond_rule",
        "tensors_inconclusive",
        "threshold",
        "tensors_over_threshold",
        "tensors_compared",
        "max_rel_l2",
        "max_noise_rel_l2",
        "noise_margin",
        "min_cosine",
        "arms_in_parallel",
    ),
}


def cell(key: str, v: Any) -> dict[str, Any]:
    """One value for a page: the readable text and, where it differs, the exact one."""
    if isinstance(v, list) and not any(isinstance(x, dict | list) for x in v):
        return {"text": ", ".join(humanize.value(key, x) for x in v) or "(none)", "exact": None}
    text = humanize.value(key, v)
    exact = str(v) if isinstance(v, int | float) and not isinstance(v, bool) else None
    if isinstance(v, str) and humanize.is_digest(v):
        exact = v
    if exact == text:
        exact = None
    return {"text": text, "exact": exact}


def flat(prefix: str, v: Any) -> list[tuple[str, Any]]:
    if isinstance(v, dict):
        out: list[tuple[str, Any]] = []
        for k, x in v.items():
            out += flat(f"{prefix}.{k}" if prefix else str(k), x)
        return out
    return [(prefix, v)]


_SHOWN_ROWS = 10
"""Rows of a long table shown before the rest collapse under a count."""


def _table(name: str, rows: list[dict[str, Any]], cols: list[str]) -> dict[str, Any]:
    """A table of records with `cols`: its first rows, and the rest apart (collapsed)."""
    out = [
        {
            "cells": [cell(c, r.get(c)) for c in cols],
            "counterexample": bool(r.get("counterexample")) or bool(r.get("over_threshold")),
            "refused": r.get("admitted") is False,
        }
        for r in rows
    ]
    return {
        "name": name,
        "cols": cols,
        "rows": out[:_SHOWN_ROWS],
        "more": out[_SHOWN_ROWS:],
        "count": len(out),
        "key": name in humanize.KEY_COLUMNS,
    }


def measurement_tables(check: str, m: dict[str, Any]) -> dict[str, Any]:
    """Every measurement: key figures first, scalars (nested dicts flattened), lists
    of scalars joined; lists of records as tables, each once with its judging
    columns (the finding) and once whole (every column, collapsed)."""
    key = [k for k in _KEY_SCALARS.get(check, ()) if k in m]
    scalars: list[tuple[str, dict[str, Any]]] = []
    tables: list[dict[str, Any]] = []
    judging: list[dict[str, Any]] = []
    for k, v in m.items():
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            rows = humanize.sorted_rows(k, v)
            cols = humanize.columns(k, rows)
            tables.append(_table(k, rows, cols))
            if k in humanize.KEY_COLUMNS:
                judging.append(_table(k, rows, cols[: humanize.JUDGING]))
        elif isinstance(v, list):
            scalars.append(
                (k, {"text": ", ".join(humanize.value(k, x) for x in v) or "(none)", "exact": None})
            )
        else:
            scalars += [(fk, cell(fk, fv)) for fk, fv in flat(k, v)]
    first = [(k, c) for k, c in scalars if k in key]
    first.sort(key=lambda kc: key.index(kc[0]))
    rest = [(k, c) for k, c in scalars if k not in key]
    tables.sort(key=lambda t: not t["key"])
    worst = next((t for t in judging if t["name"] == "tensors"), None)
    return {
        "key": first,
        "scalars": rest,
        "tables": tables,
        "judging": [t for t in judging if t is not worst],
        "worst": worst,
        "ratio": _worst_ratio(m),
    }


def _worst_ratio(m: dict[str, Any]) -> dict[str, Any] | None:
    """Admission's deciding measured/predicted: the ratio, where, and both figures.

    The worst counterexample's where there is one, else the worst admitted
    shape's: a refused shape decides nothing (its ratio says only that it would
    have fit), and the check's `max_measured_over_predicted` is over admitted
    shapes, so the headline and the table beneath it say the same figure."""
    rows = [
        r
        for r in m.get("shapes") or []
        if isinstance(r, dict)
        and isinstance(r.get("measured_over_predicted"), int | float)
        and not isinstance(r.get("measured_over_predicted"), bool)
        and r.get("admitted") is not False
    ]
    rows = [r for r in rows if r.get("counterexample") is True] or rows
    if not rows:
        return None
    r = max(rows, key=lambda r: float(r["measured_over_predicted"]))
    return {
        "ratio": humanize.number(float(r["measured_over_predicted"])),
        "shape": r.get("shape"),
        "phase": r.get("phase"),
        "predicted": cell("predicted_bytes", r.get("predicted_bytes")),
        "measured": cell("measured_bytes", r.get("measured_bytes")),
        "over": float(r["measured_over_predicted"]) > 1,
    }
