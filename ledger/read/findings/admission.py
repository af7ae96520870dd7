"""Admission's findings: the worst measured/predicted over the shapes it admitted,
its counterexamples ✘ and refusals ⊘ (`admission`)."""

from __future__ import annotations

from typing import Any

from ledger.qualification.deciding import KEYS, Deciding, deciding_of
from ledger.qualification.figures import Figure
from ledger.read.findings.model import (
    _ROWS,
    COUNTEREXAMPLE,
    REFUSED,
    Findings,
    Table,
    _b,
    _num,
    _r,
)
from ledger.read.humanize import number


def _shape_rows(m: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in m.get("shapes") or [] if isinstance(r, dict)]


def _mark(r: dict[str, Any]) -> str:
    if r.get("counterexample") is True:
        return COUNTEREXAMPLE
    return REFUSED if r.get("admitted") is False else ""


def admission(m: dict[str, Any], _: dict[str, Any], predicate: dict[str, Any]) -> Findings | None:
    rows = _shape_rows(m)
    if not rows:
        return None
    judged = [r for r in rows if _num(r.get("measured_over_predicted")) and _mark(r) != REFUSED]
    worst_of = [r for r in judged if _mark(r) == COUNTEREXAMPLE] or judged
    cx = sum(_mark(r) == COUNTEREXAMPLE for r in rows)
    refused = sum(_mark(r) == REFUSED for r in rows)
    over_refused = sum(r.get("over_refused") is True for r in rows)
    counts = (
        f"{len(rows) - refused} of {len(rows)} shape runs admitted, {cx} "
        f"counterexample{'s' if cx != 1 else ''}, {refused} refused"
        + (f" ({over_refused} of them would have fit)" if over_refused else "")
        + "."
    )
    over = None
    deciding = deciding_of(predicate)
    if deciding is not None and deciding.key == "least-ratio" and judged:
        # Failed for looseness: the least ratio decided it, said as every surface says it
        # (`ledger.qualification.deciding`), then the worst, which stayed safe.
        w = min(judged, key=lambda r: float(r["measured_over_predicted"]))
        top = max(judged, key=lambda r: float(r["measured_over_predicted"]))
        lead = (
            f"{deciding.text[0].upper()}{deciding.text[1:]} at shape {w.get('shape')} "
            f"({w.get('phase')}): measured {_b(w.get('measured_bytes'))} against predicted "
            f"{_b(w.get('predicted_bytes'))}; below its bound the estimate is too loose. "
            f"The worst, {number(float(top['measured_over_predicted']))}x at shape "
            f"{top.get('shape')}, stays safe."
        )
        chosen = [w, *(r for r in rows if _mark(r) and r is not w)]
        return Findings((lead, counts), _table(chosen), True)
    if worst_of:
        w = max(worst_of, key=lambda r: float(r["measured_over_predicted"]))
        ratio = float(w["measured_over_predicted"])
        over = ratio > 1 or cx > 0
        # Said as every surface says the deciding figure (`Deciding.text`).
        said = Deciding("worst-ratio", Figure(KEYS["worst-ratio"], ratio, "ratio"), 1.0, "max")
        lead = (
            f"{said.text[0].upper()}{said.text[1:]} at shape {w.get('shape')} "
            f"({w.get('phase')}): measured {_b(w.get('measured_bytes'))} against predicted "
            f"{_b(w.get('predicted_bytes'))}; above 1 an admitted shape is a counterexample."
        )
    else:
        lead = "No admitted shape was measured against its prediction."
    # The worst first, then every counterexample (worst first), then the refusals.
    chosen = sorted(
        (r for r in rows if _mark(r)),
        key=lambda r: (
            _mark(r) != COUNTEREXAMPLE,
            -float(r["measured_over_predicted"]) if _num(r.get("measured_over_predicted")) else 0,
        ),
    )
    if worst_of and w not in chosen:
        chosen.insert(0, w)
    return Findings((lead, counts), _table(chosen) if chosen else None, over)


def _table(chosen: list[dict[str, Any]]) -> Table:
    cols = ("shape", "phase", "predicted_bytes", "measured_bytes", "measured_over_predicted", "run")
    return Table(
        cols,
        tuple(
            (
                str(r.get("shape", "–")),
                str(r.get("phase", "–")),
                _b(r.get("predicted_bytes")),
                _b(r.get("measured_bytes")),
                _r(r.get("measured_over_predicted")),
                str(r.get("run") or "–"),
            )
            for r in chosen[:_ROWS]
        ),
        tuple(_mark(r) for r in chosen[:_ROWS]),
        max(0, len(chosen) - _ROWS),
    )
