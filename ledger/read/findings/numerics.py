"""Numerics findings: the repeat difference and chunked NLL of `regression-24view`,
and `gradient-compare` judged by the reference rule (per family or per tensor, in
floors) or by the relative-L2 threshold."""

from __future__ import annotations

from typing import Any

from ledger.read.findings.model import (
    COUNTEREXAMPLE,
    Findings,
    Table,
    _count,
    _num,
    _r,
)
from ledger.read.humanize import number, value


def regression(m: dict[str, Any], params: dict[str, Any], _: dict[str, Any]) -> Findings | None:
    if "views" not in m:
        return None
    atol = params.get("pooled_atol", 0.0)
    atol = atol if _num(atol) else 0.0
    outs = [o for o in m.get("outputs") or [] if isinstance(o, dict)]
    if not outs and _num(m.get("pooled_max_abs_diff")):
        outs = [
            {
                "name": "pooled",
                "max_abs_diff": m["pooled_max_abs_diff"],
                "elements_differing": m.get("pooled_elements_differing"),
                "elements": m.get("pooled_elements"),
            }
        ]
    shape = f"{m['views']} views" + (f" x {m['seq']} tokens" if m.get("seq") else "")
    bad = next(
        (
            f"step {k.removesuffix('_status')} ended {v}"
            for k, v in m.items()
            if k.startswith("forward") and k.endswith("_status") and v != "ok"
        ),
        None,
    )
    rows: list[tuple[str, ...]] = []
    marks: list[str] = []
    worst = None
    for o in outs:
        d = o.get("max_abs_diff")
        past = _num(d) and float(d) > float(atol)
        rows.append(
            (
                str(o.get("name")),
                "repeat (run 1 vs 2)",
                _r(d),
                _r(atol),
                f"{_count(o.get('elements_differing'))} of {_count(o.get('elements'))}",
            )
        )
        marks.append(COUNTEREXAMPLE if past else "")
        if _num(d) and (worst is None or float(d) > float(worst[1])):
            worst = (str(o.get("name")), d)
    over: bool | None = None
    sentences = []
    if worst is not None:
        over = float(worst[1]) > float(atol)
        sentences.append(
            f"{shape}, forward twice: worst repeat difference {number(worst[1])} "
            f"({worst[0]}) against tolerance {number(atol)} over {len(outs)} "
            f"output{'s' if len(outs) != 1 else ''}."
        )
    elif bad:
        over = True
        sentences.append(f"{shape}: the {bad} before the outputs were compared.")
    else:
        sentences.append(f"{shape}: no output was compared between the two runs.")
    nll = _nll(m, params)
    if nll is not None:
        text, row, past = nll
        sentences.append(text)
        rows.append(row)
        marks.append(COUNTEREXAMPLE if past else "")
        over = bool(over) or past
    elif m.get("nll_chunked_skipped"):
        sentences.append(f"Chunked NLL not judged: {m['nll_chunked_skipped']}.")
    cols = ("output", "compared", "difference", "allowed", "elements differing")
    return Findings(
        tuple(sentences), Table(cols, tuple(rows), tuple(marks)) if rows else None, over
    )


def _nll(m: dict[str, Any], params: dict[str, Any]) -> tuple[str, tuple[str, ...], bool] | None:
    """The chunked NLL's judgement: by the reference rule (its error against a
    reference-precision run, over k floors) or by the threshold (relative difference
    against ``nll_rtol`` and the run-to-run noise)."""
    fam = next(
        (f for f in m.get("families") or [] if isinstance(f, dict) and f.get("family") == "nll"),
        None,
    )
    if fam is not None and _num(fam.get("err_candidate")) and _num(fam.get("allowed")):
        err, allowed = float(fam["err_candidate"]), float(fam["allowed"])
        text = (
            f"Chunked NLL error against the reference {number(err)}, allowed "
            f"{number(allowed)} (the error is {_r(fam.get('multiple'))} times its floor, "
            f"k = {_r(params.get('k', 2.0))})."
        )
        row = ("nll", "chunked vs reference", number(err), number(allowed), "–")
        return text, row, err > allowed
    diff, rtol = m.get("nll_rel_diff"), m.get("nll_rtol")
    if _num(diff):
        noise = m.get("nll_noise_rel_diff")
        margin = params.get("noise_margin", 2.0)
        bound = float(rtol) if _num(rtol) else None
        past = bound is not None and float(diff) > bound
        if past and _num(noise) and _num(margin):
            past = float(diff) > float(noise) * float(margin)
        text = (
            f"Chunked vs unchunked NLL relative difference {number(diff)} against "
            f"tolerance {_r(rtol)} (run-to-run noise {_r(noise)})."
        )
        row = ("nll", "chunked vs unchunked", number(diff), _r(rtol), "–")
        return text, row, past
    return None


def gradient(m: dict[str, Any], params: dict[str, Any], _: dict[str, Any]) -> Findings | None:
    tensors = [t for t in m.get("tensors") or [] if isinstance(t, dict)]
    compared = m.get("tensors_compared")
    if not tensors and not _num(compared):
        return None
    fams = [f for f in m.get("families") or [] if isinstance(f, dict) and "allowed" in f]
    if fams:
        return _by_reference(m, params, fams)
    if m.get("rule") == "reference" or any("multiple" in t for t in tensors):
        return _by_floors(m, params, tensors)
    return _by_threshold(m, tensors)


def _allowances(f: dict[str, Any]) -> list[tuple[float, str, float, float]]:
    """A family's error over each allowance it is judged by: ``precision`` (its error
    against the reference within k floors + atol) and ``function`` (the same in the
    reference precision, within what that precision allows)."""
    out = []
    for by, err, allowed in (
        ("precision", f.get("err_candidate"), f.get("allowed")),
        ("function", f.get("err_function"), f.get("function_allowed")),
    ):
        if _num(err) and _num(allowed) and allowed > 0:
            out.append((float(err) / float(allowed), by, float(err), float(allowed)))
    return out


def _by_reference(
    m: dict[str, Any], params: dict[str, Any], fams: list[dict[str, Any]]
) -> Findings:
    k = params.get("k", m.get("k", 2.0))
    beyond = m.get("tensors_beyond_rule")
    lead = (
        f"{value('n', beyond)} of {value('n', m.get('tensors_compared'))} tensors beyond the "
        f"rule (error against the reference at most k = {_r(k)} floors + "
        f"{_r(m.get('atol'))}, and within its allowance in the reference precision), "
        f"{value('n', m.get('tensors_inconclusive'))} inconclusive."
    )
    ranked = sorted(
        ((max(_allowances(f), default=None), f) for f in fams),
        key=lambda x: -x[0][0] if x[0] is not None else 0.0,
    )
    sentences = [lead]
    rows: list[tuple[str, ...]] = []
    marks: list[str] = []
    for worst, f in ranked:
        if worst is None:
            continue
        ratio, by, err, allowed = worst
        if not rows:
            sentences.append(
                f"Worst: {f.get('family')} ({f.get('worst')}): {by} error {number(err)} "
                f"against allowed {number(allowed)}, {number(ratio)} times its allowance."
            )
        rows.append(
            (
                str(f.get("family")),
                number(ratio),
                number(err),
                number(allowed),
                by,
                str(f.get("state", "–")),
            )
        )
        marks.append(COUNTEREXAMPLE if f.get("state") == "failed" else "")
    over = bool(beyond) if _num(beyond) else None
    cols = ("family", "times allowed", "error", "allowed", "judged by", "state")
    table = Table(cols, tuple(rows[:5]), tuple(marks[:5]), max(0, len(rows) - 5))
    return Findings(tuple(sentences), table if rows else None, over)


def _by_floors(
    m: dict[str, Any], params: dict[str, Any], tensors: list[dict[str, Any]]
) -> Findings:
    ranked = sorted(
        tensors, key=lambda t: -float(t["multiple"]) if _num(t.get("multiple")) else 0.0
    )
    k = params.get("k", m.get("k", 2.0))
    beyond = m.get("tensors_beyond_rule")
    sentences = [
        f"{value('n', beyond)} of {value('n', m.get('tensors_compared'))} tensors beyond the "
        f"rule (error at most k = {_r(k)} times its floor + {_r(m.get('atol'))}), "
        f"{value('n', m.get('tensors_inconclusive'))} inconclusive."
    ]
    if ranked:
        w = ranked[0]
        sentences.append(
            f"Worst: {w.get('name')}, error {_r(w.get('err_candidate'))} over floor "
            f"{_r(w.get('err_base'))} = {_r(w.get('multiple'))} floors."
        )
    rows = tuple(
        (
            str(t.get("name")),
            str(t.get("state", "–")),
            _r(t.get("err_candidate")),
            _r(t.get("err_base")),
            _r(t.get("multiple")),
        )
        for t in ranked[:5]
    )
    marks = tuple(COUNTEREXAMPLE if t.get("state") == "failed" else "" for t in ranked[:5])
    cols = ("tensor", "state", "error", "floor", "floors")
    over = bool(beyond) if _num(beyond) else None
    table = Table(cols, rows, marks, max(0, len(ranked) - 5))
    return Findings(tuple(sentences), table if rows else None, over)


def _by_threshold(m: dict[str, Any], tensors: list[dict[str, Any]]) -> Findings:
    ranked = sorted(tensors, key=lambda t: -float(t["rel_l2"]) if _num(t.get("rel_l2")) else 0.0)
    thr = m.get("threshold")
    n_over = m.get("tensors_over_threshold")
    sentences = [
        f"Worst relative L2 {_r(m.get('max_rel_l2'))} against threshold {_r(thr)}: "
        f"{value('n', n_over)} of {value('n', m.get('tensors_compared'))} tensors over it "
        f"(run-to-run noise up to {_r(m.get('max_noise_rel_l2'))}, margin "
        f"{_r(m.get('noise_margin'))})."
    ]
    rows = tuple(
        (
            str(t.get("name")),
            _r(t.get("rel_l2")),
            _r(t.get("noise_rel_l2")),
            _r(thr),
            _r(t.get("cosine")),
        )
        for t in ranked[:5]
    )
    marks = tuple(COUNTEREXAMPLE if t.get("over_threshold") is True else "" for t in ranked[:5])
    cols = ("tensor", "rel L2", "noise rel L2", "threshold", "cosine")
    over = bool(n_over) if _num(n_over) else None
    table = Table(cols, rows, marks, max(0, len(ranked) - 5))
    return Findings(tuple(sentences), table if rows else None, over)
