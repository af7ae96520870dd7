"""What the plan alone says about its claims, without running any code.

A ready adapter (`runners.adapt.library`) predicts memory through a plan-named
``estimator`` or, naming none (or ``"builtin"``), through the built-in estimator
calibrated on the device: the claims whose checks need a prediction are judged
either way, and the line says which estimator. Everything else is for the probe
(`ledger doctor`) to find; here it counts as judged."""

from __future__ import annotations

from typing import Any

ADAPTERS = ("runners.adapt.library:causal_lm", "runners.adapt.library:module")
NEEDS_ESTIMATE = ("admission", "full-prefix-backward")
ADD = 'workload_params: estimator = "your_module:estimate"'
BUILTIN = (
    "estimate: the built-in estimator, calibrated on the device at small shapes and held "
    "to its stated error"
)


def judge_from_plan(claims: list[dict[str, Any]]) -> dict[str, Any]:
    """A report shaped as `runners.doctor`'s, from the plan's claims alone."""
    out = []
    for c in claims:
        check = c["check"]
        inner = (c["params"].get("check") or "") if check == "observer-off-control" else check
        row: dict[str, Any] = {
            "claim": c["claim"],
            "check": check,
            "judgement": "judged",
            "fallbacks": [],
            "why": [],
            "add": [],
            "required": c.get("required", True),
        }
        named = c["workload_params"].get("estimator")
        if c["workload"] in ADAPTERS and inner in NEEDS_ESTIMATE and named in (None, "", "builtin"):
            row.update(judgement="fallback", fallbacks=[BUILTIN])
        out.append(row)
    n = sum(r["judgement"] == "inconclusive" for r in out)
    built = sum(r["judgement"] == "fallback" for r in out)
    which = f" ({built} on the built-in estimator)" if built else ""
    return {
        "summary": f"doctor (from the plan): {len(out)} claim(s): {len(out) - n} can be "
        f"judged{which}, {n} cannot; `ledger doctor` probes the code",
        "claims": out,
        "lines": [_line(r) for r in out],
    }


def _line(r: dict[str, Any]) -> str:
    if r["judgement"] == "judged":
        return f"{r['claim']}: can be judged"
    if r["judgement"] == "fallback":
        return f"{r['claim']}: can be judged through a fallback ({'; '.join(r['fallbacks'])})"
    return f"{r['claim']}: will be inconclusive ({'; '.join(r['why'])}); add: {r['add'][0]}"
