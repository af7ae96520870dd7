"""Imported receipts' findings: what the importer read (JUnit, in-toto test
results, admission event reports), said as read, never as measured by Ledger."""

from __future__ import annotations

from typing import Any

from ledger.read.findings.model import (
    _ROWS,
    COUNTEREXAMPLE,
    Findings,
    Table,
    _b,
    _num,
)
from ledger.read.humanize import figures, number, value


def junit(m: dict[str, Any], _: dict[str, Any], __: dict[str, Any]) -> Findings | None:
    if "tests" not in m:
        return None
    imp = m.get("imported") or {}
    lead = (
        f"The importer read {m['tests']} tests from {imp.get('file', 'the JUnit file')} "
        f"(not measured by Ledger): {m.get('passed_count', 0)} passed, "
        f"{m.get('failed_count', 0)} failed, {m.get('error_count', 0)} errors, "
        f"{m.get('skipped_count', 0)} skipped, {m.get('xfailed_count', 0)} xfailed."
    )
    bad = [("failed", t) for t in m.get("counterexamples") or []] + [
        ("error", t) for t in m.get("errors") or []
    ]
    if not bad:
        return Findings((lead,), None, False, by="importer")
    rows = tuple(
        (str(t.get("test")), status, _first(t.get("message"))) for status, t in bad[:_ROWS]
    )
    return Findings(
        (lead,),
        Table(("test", "status", "message"), rows, (COUNTEREXAMPLE,) * len(rows)),
        True,
        by="importer",
    )


def _first(text: Any) -> str:
    line = str(text or "").strip().splitlines()[:1]
    out = figures(line[0]) if line else ""
    return out if len(out) <= 120 else out[:119] + "…"


def intoto(m: dict[str, Any], _: dict[str, Any], __: dict[str, Any]) -> Findings | None:
    if "result" not in m:
        return None
    sig = {
        None: "the statement is unsigned",
        True: "its signature verified",
        False: "its signature not verified",
    }.get(m.get("signature_verified"), "?")
    lead = (
        f"The importer read {value('n', m.get('statements'))} in-toto test-result "
        f"statement(s) (not measured by Ledger): result {m['result']}; "
        f"{m.get('passed_count', 0)} passed, {m.get('warned_count', 0)} warned, "
        f"{m.get('failed_count', 0)} failed; {sig}."
    )
    tests = [("FAILED", t) for t in m.get("counterexamples") or []] + [
        ("WARNED", t) for t in m.get("warned") or []
    ]
    if not tests:
        return Findings((lead,), None, m["result"] == "FAILED", by="importer")
    rows = tuple((str(t), r) for r, t in tests[:_ROWS])
    marks = tuple(COUNTEREXAMPLE if r == "FAILED" else "" for r, _ in tests[:_ROWS])
    return Findings(
        (lead,), Table(("test", "result"), rows, marks), m["result"] == "FAILED", by="importer"
    )


def events(m: dict[str, Any], _: dict[str, Any], __: dict[str, Any]) -> Findings | None:
    if "events" not in m:
        return None
    lead = (
        f"The importer read {m['events']} admission reports (not measured by Ledger): "
        f"{m.get('oom_after_admit_count', 0)} out of memory after admission, "
        f"{m.get('under_prediction_count', 0)} under-predicted, "
        f"{m.get('over_prediction_count', 0)} over-predicted, "
        f"{m.get('refused_count', 0)} refused; admitted steps "
        f"{value('n', m.get('admitted_steps'))}."
    )
    sentences = [lead]
    cx = m.get("counterexample")
    if isinstance(cx, dict):
        obs, pred = m.get("observed_peak_bytes"), m.get("predicted_peak_bytes")
        sentences.append(
            f"First counterexample at {cx.get('source')}"
            + (f" ({cx['phase']})" if cx.get("phase") else "")
            + f": observed peak "
            f"{_b(obs)} against predicted {_b(pred)}"
            + (
                f", observed/predicted {number(obs / pred)}"
                if _num(obs) and _num(pred) and pred
                else ""
            )
            + "."
        )
    # The reports that fail the claim, with their figures (the importer's records).
    bad = [
        r
        for r in m.get("records") or []
        if isinstance(r, dict) and r.get("finding") in ("oom-after-admit", "under-prediction")
    ]
    rows = []
    for r in bad[:_ROWS]:
        obs, pred = r.get("observed_peak_bytes"), r.get("predicted_peak_bytes")
        ratio = number(obs / pred) if _num(obs) and _num(pred) and pred else "–"
        rows.append((str(r.get("source")), str(r.get("finding")), _b(obs), _b(pred), ratio))
    cols = ("report", "finding", "observed peak", "predicted", "observed/predicted")
    table = Table(cols, tuple(rows), (COUNTEREXAMPLE,) * len(rows), max(0, len(bad) - _ROWS))
    listed = m.get("counterexamples") or []
    return Findings(tuple(sentences), table if rows else None, bool(listed), by="importer")
