"""A memory planner's reports: ART's planner-miss spool, and plain JSON-lines events.

ART writes one JSON object per file, ``<id>.json``, into a spool directory,
``kind: "art-planner-miss"``, only for steps whose estimate missed beyond
``threshold_pct`` (either direction) or that ran out of memory; a step within
the threshold leaves nothing. Format 2 names the ``event`` (``estimate_miss``,
``oom``, ``admission_refused``, ``planning_error``) and the planner's
``decision.outcome`` (``admitted``, ``admitted_oversized``: a user override,
``refused``); format 1 has neither (``oom: true`` is an OOM, an ``error_pct``
beyond ``threshold_pct`` a miss). Any figure may be null.

Against "no OOM after admission, observed peak within the prediction": an OOM
of an admitted step and an under-prediction beyond the threshold are
counterexamples; an over-prediction is an estimator-tightness finding, never a
failure; a refusal counts for nothing; a planning error is inconclusive; an
OOM after ``admitted_oversized`` is the user's override, not the planner's
fault. Since good steps leave no file, a pass needs the run's count of
admitted steps (``Context.admitted``). docs/import.md states each mapping.
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.evidence.errors import InputError
from ledger.importers.reader import ClaimMap, Context, Finding, source_files

__all__ = ["KINDS", "Event", "load", "read"]

KINDS = ("admitted", "estimate_miss", "oom", "admission_refused", "planning_error")
ART_KIND = "art-planner-miss"
DECISIONS = ("admitted", "admitted_oversized", "refused", "planning_error")
# A phase is a name: a crafted one with invisible or control characters would match
# no claim's pattern and let its report pass unseen.
_PHASE = re.compile(r"[A-Za-z0-9_.:/\-]{1,200}")
# ART's names first; the plain event lines' older names are read as the same figures.
_BYTES = {
    "predicted_peak_bytes": ("predicted_peak_bytes", "predicted_bytes"),
    "admission_peak_bytes": ("admission_peak_bytes", "admission_bytes"),
    "observed_peak_bytes": ("observed_peak_bytes",),
    "partial_peak_bytes": ("partial_peak_bytes",),
}
_PCTS = ("error_pct", "threshold_pct")
_MAX_LISTED = 200
_MAX_SAFE = 2**53  # what a signed statement can hold exactly (RFC 8785)
_OVERRIDE = "admitted_oversized: a user override, not the planner's fault"


@dataclass(frozen=True, slots=True)
class Event:
    """One report, normalised: every figure ART wrote, nulls kept as None."""

    where: str
    event: str
    format: int | None
    decision: str | None
    phase: str | None
    oom: bool
    figures: dict[str, int | None]
    pcts: dict[str, float | int | None]
    raw: dict[str, Any]

    @property
    def direction(self) -> str | None:
        """``under`` (observed above predicted), ``over``, ``exact``, or None when
        the report holds neither the two peaks nor a signed error."""
        obs, pred = self.figures["observed_peak_bytes"], self.figures["predicted_peak_bytes"]
        if obs is not None and pred is not None:
            return "under" if obs > pred else "over" if obs < pred else "exact"
        err = self.pcts["error_pct"]
        if err is None or err == 0:
            return None
        return "under" if err > 0 else "over"

    @property
    def admitted(self) -> bool:
        """The planner let the step run (format 1 has no decision: a report of a
        step that ran, or ran out of memory, is of an admitted step)."""
        return self.decision in (None, "admitted")

    def item(self) -> str:
        """What a claim's pattern selects: the phase, else a plain event's step."""
        return str(self.raw.get("phase", self.raw.get("step", "")))

    def to_json(self, finding: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "source": self.where,
            "id": _text(self.raw.get("id")),
            "occurred_at": _text(self.raw.get("occurred_at")),
            "format": self.format,
            "event": self.event,
            "decision": self.decision,
            "phase": self.phase,
            "oom": self.oom,
            **self.figures,
            **self.pcts,
            "finding": finding,
        }
        for k in ("replay_complete", "replay_scope", "incomplete_reasons", "failure"):
            if k in self.raw:
                out[k] = _small(self.raw[k])
        return out


def _text(v: Any) -> str | None:
    return None if v is None else str(v)


def _small(v: Any) -> Any:
    """A JSON value kept as written when small and safe, else as (truncated) text."""
    if isinstance(v, str):
        return v[:500]
    text = json.dumps(v, sort_keys=True)
    return v if len(text) <= 500 and _safe(v) else text[:500]


def _safe(v: Any) -> bool:
    if isinstance(v, dict):
        return all(_safe(x) for x in v.values())
    if isinstance(v, list):
        return all(_safe(x) for x in v)
    if isinstance(v, float):
        return v == v and abs(v) != float("inf")
    return not isinstance(v, int) or isinstance(v, bool) or abs(v) < 2**53


def _objects(f: Path) -> list[tuple[str, Any]]:
    """One canonical JSON object per file, or one per line (JSON lines)."""
    try:
        text = f.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{f.name}: {e}") from None
    try:
        return [(f.name, json.loads(text))]
    except ValueError:
        pass
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((f"{f.name}:{n}", json.loads(line)))
        except ValueError as e:
            raise InputError(f"{f.name}:{n}: not JSON: {e}") from None
    return out


def _kind(where: str, ev: dict[str, Any]) -> tuple[str, int | None]:
    fmt = ev.get("format")
    if fmt is not None and fmt not in (1, 2):
        raise InputError(f"{where}: format {fmt!r} is not 1 or 2")
    if isinstance(ev.get("event"), str):
        return ev["event"], fmt
    if ev.get("kind") == ART_KIND or fmt == 1:
        # Format 1 (no event): the file itself is the finding; its figures say which.
        fmt = 1 if fmt is None else fmt
        if ev.get("oom") is True:
            return "oom", fmt
        err, limit = ev.get("error_pct"), ev.get("threshold_pct")
        if isinstance(err, int | float) and isinstance(limit, int | float) and abs(err) <= limit:
            return "within_threshold", fmt
        return "estimate_miss", fmt
    if isinstance(ev.get("kind"), str) and ev["kind"] in KINDS:
        return ev["kind"], fmt
    raise InputError(f"{where}: a report needs a string 'event' (or kind {ART_KIND!r})")


def _event(where: str, ev: Any) -> Event:
    if not isinstance(ev, dict):
        raise InputError(f"{where}: a report must be a JSON object")
    kind, fmt = _kind(where, ev)
    figures: dict[str, int | None] = {}
    for name, keys in _BYTES.items():
        v = next((ev[k] for k in keys if k in ev), None)
        if v is not None and (
            not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= _MAX_SAFE
        ):
            raise InputError(f"{where}: {name} must be null or a whole number of bytes up to 2^53")
        figures[name] = v
    pcts: dict[str, float | int | None] = {}
    for name in _PCTS:
        v = ev.get(name)
        if v is not None and (
            not isinstance(v, int | float)
            or isinstance(v, bool)
            or not math.isfinite(v)
            or abs(v) > _MAX_SAFE
        ):
            raise InputError(f"{where}: {name} must be null or a finite number")
        pcts[name] = v
    decision = ev.get("decision")
    outcome = decision.get("outcome") if isinstance(decision, dict) else decision
    if outcome is None and ev.get("admitted") is False:
        outcome = "refused"  # a plain event line marked not admitted
    if outcome is not None and outcome not in DECISIONS:
        raise InputError(
            f"{where}: decision outcome {outcome!r} is not one of {', '.join(DECISIONS)}"
        )
    if outcome == "planning_error":
        # ART's real spool: the planner could not decide for this step.
        kind = "planning_error" if kind in ("estimate_miss", "within_threshold") else kind
    oom = kind == "oom" or ev.get("oom") is True
    _consistent(where, kind, outcome, ev)
    phase = ev.get("phase")
    if phase is not None and (not isinstance(phase, str) or not _PHASE.fullmatch(phase)):
        raise InputError(
            f"{where}: phase {phase!r} is not a phase name (letters, digits and _ . : / - only)"
        )
    return Event(where, kind, fmt, outcome, _text(phase), oom, figures, pcts, ev)


def _consistent(where: str, kind: str, outcome: str | None, ev: dict[str, Any]) -> None:
    """A report whose fields contradict each other is refused, never read one way."""
    said = []
    if kind == "admission_refused" and outcome in ("admitted", "admitted_oversized"):
        said.append(f"event admission_refused with decision {outcome}")
    if kind in ("admission_refused", "planning_error") and ev.get("oom") is True:
        said.append(f"event {kind} with oom true (a step that did not run ran out of memory)")
    if outcome == "refused" and (kind == "oom" or ev.get("oom") is True):
        said.append("decision refused with an out-of-memory (a refused step never ran)")
    if kind == "oom" and ev.get("oom") is False:
        said.append("event oom with oom false")
    if said:
        raise InputError(f"{where}: contradictory report: {'; '.join(said)}")


def load(path: Path) -> list[Event]:
    """Every report in a file, a JSON-lines file or a spool directory, in time order."""
    files = source_files(path)
    events = [_event(where, ev) for f in files for where, ev in _objects(f)]
    return sorted(events, key=lambda e: (str(e.raw.get("occurred_at") or ""), e.where))


def _figures(e: Event) -> str:
    have = [f"{k.removesuffix('_peak_bytes')} {v}" for k, v in e.figures.items() if v is not None]
    if e.pcts["error_pct"] is not None:
        have.append(f"error {e.pcts['error_pct']}%")
    return f" ({', '.join(have)})" if have else ""


def _classify(e: Event) -> str:
    """What one report is evidence of, for the no-OOM-after-admit claim."""
    if e.event == "admission_refused" or e.decision == "refused":
        return "refusal"
    if e.event == "planning_error":
        return "planning-error"
    if e.oom:
        return "user-override" if e.decision == "admitted_oversized" else "oom-after-admit"
    if e.event == "estimate_miss":
        d = e.direction
        if d == "under":
            return "under-prediction"
        return "over-prediction" if d == "over" else "miss-unknown-direction"
    if e.event == "admitted":
        return "admitted"
    if e.event == "within_threshold":
        return "within-threshold"
    return "unknown-kind"


def _where(e: Event) -> str:
    phase = f" in {e.phase}" if e.phase else ""
    return f"{e.where}{phase}"


def _finding(events: list[Event], admitted_given: int | None) -> Finding:
    """The reports judged: their counts and records as the receipt's measurements,
    then the outcome they decide."""
    kinds = [(e, _classify(e)) for e in events]
    by: dict[str, list[Event]] = {}
    for e, k in kinds:
        by.setdefault(k, []).append(e)
    bad = [
        f"{_where(e)}: out of memory after admission{_figures(e)}"
        if k == "oom-after-admit"
        else f"{_where(e)}: observed peak above the prediction beyond the threshold{_figures(e)}"
        for e, k in kinds
        if k in ("oom-after-admit", "under-prediction")
    ]
    # Plain event lines name admitted steps; ART's spool does not (good steps leave no file).
    admitted = (
        admitted_given if admitted_given is not None else (len(by.get("admitted", [])) or None)
    )
    m = _measurements(events, kinds, by, bad, admitted, admitted_given)
    return _outcome(len(events), by, bad, admitted, m)


def _measurements(
    events: list[Event],
    kinds: list[tuple[Event, str]],
    by: dict[str, list[Event]],
    bad: list[str],
    admitted: int | None,
    admitted_given: int | None,
) -> dict[str, Any]:
    """The receipt's measurements: the count of each kind of report, the estimator's
    tightness, the first records, and the first counterexample's own figures."""

    def n(k: str) -> int:
        return len(by.get(k, []))

    over = by.get("over-prediction", [])
    over_pct = [abs(e.pcts["error_pct"]) for e in over if e.pcts["error_pct"] is not None]
    m: dict[str, Any] = {
        "events": len(events),
        "admitted_steps": admitted,
        "admitted_steps_from": "given" if admitted_given is not None else "reports",
        "oom_after_admit_count": n("oom-after-admit"),
        "under_prediction_count": n("under-prediction"),
        "over_prediction_count": n("over-prediction"),
        "refused_count": n("refusal"),
        "planning_error_count": n("planning-error"),
        "user_override_oom_count": n("user-override"),
        "unknown_direction_count": n("miss-unknown-direction"),
        "unknown_kinds": sorted({e.event for e in by.get("unknown-kind", [])}),
        "counterexamples": bad[:_MAX_LISTED],
        # Tightness of the estimator, reported as its own measurement: never a failure.
        "estimator_tightness": {
            "over_predictions": len(over),
            "max_over_prediction_pct": max(over_pct, default=None),
            "max_over_prediction_bytes": max(
                (
                    e.figures["predicted_peak_bytes"] - e.figures["observed_peak_bytes"]
                    for e in over
                    if e.figures["predicted_peak_bytes"] is not None
                    and e.figures["observed_peak_bytes"] is not None
                ),
                default=None,
            ),
        },
        "user_overrides": [
            f"{_where(e)}: out of memory after {_OVERRIDE}{_figures(e)}"
            for e in by.get("user-override", [])
        ][:_MAX_LISTED],
        "records": [e.to_json(k) for e, k in kinds][:_MAX_LISTED],
        "records_listed": min(len(kinds), _MAX_LISTED),
    }
    worst = [e for e, k in kinds if k in ("oom-after-admit", "under-prediction")]
    if worst:
        # The first counterexample's figures, as measurements of the receipt itself
        # (exact bytes; calibration and the surfaces read them there).
        m["counterexample"] = {"source": worst[0].where, "phase": worst[0].phase}
        for k, v in worst[0].figures.items():
            if v is not None:
                m[k] = v
    return m


def _outcome(
    events: int,
    by: dict[str, list[Event]],
    bad: list[str],
    admitted: int | None,
    m: dict[str, Any],
) -> Finding:
    """The outcome the reports decide: a counterexample fails; a planning error, a miss
    of unknown direction or no count of admitted steps is inconclusive."""

    def n(k: str) -> int:
        return len(by.get(k, []))

    overrides = f"; {n('user-override')} OOM(s) after {_OVERRIDE}" if n("user-override") else ""
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        return Finding("failed", f"counterexample: {bad[0]}{more}{overrides}", m)
    if n("planning-error"):
        # Inconclusive for the steps it names; every other report was judged above
        # (a counterexample among them fails the claim).
        first = by["planning-error"][0]
        return Finding(
            "inconclusive",
            f"{n('planning-error')} planning error(s): the planner could not decide "
            f"({_where(first)}); the other {events - n('planning-error')} report(s) "
            f"hold no counterexample{overrides}",
            m,
        )
    if n("miss-unknown-direction"):
        first = by["miss-unknown-direction"][0]
        return Finding(
            "inconclusive",
            f"{_where(first)}: an estimate miss with neither both peaks nor a signed "
            f"error: under- or over-prediction cannot be told{overrides}",
            m,
        )
    if admitted is None:
        return Finding(
            "inconclusive",
            "the planner writes nothing for steps within its threshold, so without the "
            "run's count of admitted steps (--admitted N or --manifest FILE) no report "
            f"shows a pass{overrides}",
            m,
        )
    if admitted == 0:
        if n("refusal"):
            return Finding("refused", f"every one of {n('refusal')} steps was refused", m)
        return Finding("inconclusive", f"the run admitted no step{overrides}", m)
    return Finding("passed", None, m)


def read(path: Path, claims: ClaimMap, ctx: Context) -> dict[str, Finding]:
    events = load(path)
    return {
        claim: _finding(
            [e for e in events if pat == "*" or fnmatch.fnmatchcase(e.item(), pat)],
            ctx.admitted,
        )
        for claim, pat in claims
    }
