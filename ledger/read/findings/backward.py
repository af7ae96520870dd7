"""The full-prefix backward's findings: the target step's measured increment
against its prediction after the prefix steps (`full-prefix-backward`)."""

from __future__ import annotations

import re
from typing import Any

from ledger.read.findings.model import (
    COUNTEREXAMPLE,
    REFUSED,
    Findings,
    Table,
    _b,
    _num,
    _r,
)
from ledger.read.humanize import number

_STEP = re.compile(r"^(prefix\d+|optimizer_step|target)_status$")


def full_prefix(m: dict[str, Any], _: dict[str, Any], __: dict[str, Any]) -> Findings | None:
    steps = sorted(
        (k.removesuffix("_status") for k in m if _STEP.match(k)),
        key=lambda s: (s == "target", s == "optimizer_step", len(s), s),
    )
    if not steps:
        return None
    target = str(m.get("target_shape", "?"))
    prefix = str(m.get("prefix_shape", "?"))
    n = sum(s.startswith("prefix") for s in steps)
    pred, usable = m.get("target_predicted_bytes"), m.get("target_usable_bytes")
    ratio, measured = m.get("target_measured_over_predicted"), m.get("target_measured_bytes")
    bad = next((s for s in steps if m.get(f"{s}_status") not in ("ok", None)), None)
    over: bool | None = None
    if m.get("target_admitted") is False and measured is None:
        lead = (
            f"Target step {target} (forward_backward) refused after {n} prefix steps "
            f"({prefix}): predicted {_b(pred)} > usable {_b(usable)}."
        )
    elif _num(ratio):
        over = float(ratio) > 1 or m.get("target_status") == "oom"
        lead = (
            f"Target step {target} (forward_backward) after {n} prefix steps ({prefix}): "
            f"measured increment {_b(measured)} against predicted {_b(pred)}, "
            f"measured/predicted {number(ratio)}; it passes at 1 or below "
            f"(usable {_b(usable)})."
        )
    elif bad is not None:
        over = True
        lead = f"The step {bad} ended {m.get(f'{bad}_status')} before the target was judged."
    else:
        lead = f"Target step {target} recorded no measured increment."
    sentences = [lead]
    if bad is not None and _num(ratio):
        sentences.append(f"The step {bad} ended {m.get(f'{bad}_status')}.")
    rows: list[tuple[str, ...]] = []
    marks: list[str] = []
    for s in steps:
        is_t = s == "target"
        rows.append(
            (
                s,
                target if is_t else ("–" if s == "optimizer_step" else prefix),
                _b(m.get(f"{s}_increment_bytes")),
                _b(pred) if is_t else "–",
                _r(ratio) if is_t else "–",
                _b(m.get(f"{s}_peak_allocated_bytes")),
                str(m.get(f"{s}_status", "–")),
            )
        )
        if is_t and m.get("target_admitted") is False:
            marks.append(REFUSED)
        elif (is_t and over) or m.get(f"{s}_status") not in ("ok", None):
            marks.append(COUNTEREXAMPLE)
        else:
            marks.append("")
    if "target_status" not in m and m.get("target_admitted") is False:
        rows.append(("target", target, "–", _b(pred), "–", "–", "refused"))
        marks.append(REFUSED)
    # The prediction and the ratio before the rest: 80 columns reach the deciding figure.
    cols = (
        "step",
        "shape",
        "measured increment",
        "predicted",
        "measured/predicted",
        "peak allocated",
        "status",
    )
    return Findings(tuple(sentences), Table(cols, tuple(rows), tuple(marks)), over)
