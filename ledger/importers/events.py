"""Memory-admission event reports: JSON lines as trainers' admission controllers write them.

Each line is one event: ``{"event": KIND, "predicted_bytes": ..., "admission_bytes":
..., "observed_peak_bytes": ..., ...}``. Against the claim "no OOM after
admission, measured <= predicted": an ``oom`` of an admitted step (``admitted``
not false) and an ``estimate_miss`` (observed peak above the prediction) are
counterexamples (failed); ``admission_refused`` is a refusal, never a failure;
``planning_error`` means the controller could not decide (inconclusive unless
a counterexample is there); ``admitted`` events are the steps that ran within
the contract. Only admitted steps make a pass; a report of refusals alone is
refused, and one with neither is inconclusive. Unknown kinds are counted.
"""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path
from typing import Any

from ledger.errors import InputError
from ledger.importers import ClaimMap, Finding

__all__ = ["KINDS", "read"]

KINDS = ("admitted", "estimate_miss", "oom", "admission_refused", "planning_error")
_FIGURES = ("predicted_bytes", "admission_bytes", "observed_peak_bytes")
_MAX_LISTED = 50


def _events(path: Path) -> list[dict[str, Any]]:
    out = []
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path.name}: {e}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
        except ValueError as e:
            raise InputError(f"{path.name}:{n}: not JSON: {e}") from None
        kind = ev.get("event", ev.get("kind")) if isinstance(ev, dict) else None
        if not isinstance(kind, str):
            raise InputError(f"{path.name}:{n}: an event needs a string 'event'")
        for f in _FIGURES:
            if f in ev and not (isinstance(ev[f], int) and not isinstance(ev[f], bool)):
                raise InputError(f"{path.name}:{n}: {f} must be an integer number of bytes")
        out.append({**ev, "event": kind, "line": n})
    return out


def _counterexample(ev: dict[str, Any]) -> str | None:
    if ev["event"] == "oom" and ev.get("admitted", True) is not False:
        return f"line {ev['line']}: out of memory after admission" + _figures(ev)
    if ev["event"] == "estimate_miss":
        return f"line {ev['line']}: observed peak above the prediction" + _figures(ev)
    return None


def _figures(ev: dict[str, Any]) -> str:
    have = [f"{f.removesuffix('_bytes')} {ev[f]}" for f in _FIGURES if f in ev]
    return f" ({', '.join(have)})" if have else ""


def _finding(events: list[dict[str, Any]]) -> Finding:
    counts = {k: sum(1 for e in events if e["event"] == k) for k in KINDS}
    unknown = sorted({e["event"] for e in events} - set(KINDS))
    bad = [c for e in events if (c := _counterexample(e))]
    misses = [
        e["observed_peak_bytes"] - e["predicted_bytes"]
        for e in events
        if "observed_peak_bytes" in e and "predicted_bytes" in e
    ]
    m: dict[str, Any] = {
        "events": len(events),
        **{f"{k}_count": v for k, v in counts.items()},
        "unknown_kinds": unknown,
        "counterexamples": bad[:_MAX_LISTED],
        "max_observed_minus_predicted_bytes": max(misses, default=None),
        "oom_unadmitted_count": sum(
            1 for e in events if e["event"] == "oom" and e.get("admitted") is False
        ),
    }
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        return Finding("failed", f"counterexample: {bad[0]}{more}", m)
    if counts["planning_error"]:
        return Finding(
            "inconclusive",
            f"{counts['planning_error']} planning errors: the controller could not decide",
            m,
        )
    if counts["admitted"]:
        return Finding("passed", None, m)
    if counts["admission_refused"]:
        return Finding(
            "refused", f"every one of {counts['admission_refused']} steps was refused", m
        )
    return Finding("inconclusive", "the report records no admitted step", m)


def read(path: Path, claims: ClaimMap) -> dict[str, Finding]:
    events = _events(path)
    return {
        claim: _finding(
            [e for e in events if pat == "*" or fnmatch.fnmatchcase(str(e.get("step", "")), pat)]
        )
        for claim, pat in claims
    }
