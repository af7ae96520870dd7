"""What a receipt's check found: its deciding figures, per check kind, read from the
predicate alone.

Each kind says in one or two sentences the figure that decided its outcome
against the bound it was judged by, and gives a small table of the rows behind
it (a counterexample marked ✘, a refusal ⊘). The receipt page and `ledger show`
render the same `Findings`, so both say the same thing. A receipt whose kind is
unknown here, or that records none of its kind's figures (an infra-error before
any measurement), says in one line what it records instead: never nothing.
Imported receipts say that the figures are what the importer read, not what
Ledger measured.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

from ledger.read.humanize import figures, iec, number, value

__all__ = ["COUNTEREXAMPLE", "REFUSED", "Findings", "Table", "findings", "table_lines"]

COUNTEREXAMPLE = "✘"
REFUSED = "⊘"
_ROWS = 10
"""Rows of a finding's table: the deciding ones; every row is under the measurements."""


@dataclass(frozen=True, slots=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    marks: tuple[str, ...] = ()
    """Per row: COUNTEREXAMPLE, REFUSED or ""; empty where the kind marks nothing."""
    more: int = 0
    """Rows of the same kind left out (every row is under the receipt's measurements)."""


@dataclass(frozen=True, slots=True)
class Findings:
    sentences: tuple[str, ...]
    table: Table | None = None
    over: bool | None = None
    """Whether the deciding figure is past its bound (None: no bound was read)."""
    by: str = "check"
    """Who read the figures: ``check`` (Ledger's own), ``importer``, ``command``
    (`ledger run`) or ``harness`` (another harness's, attested)."""


def _num(v: Any) -> TypeGuard[int | float]:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _b(v: Any) -> str:
    return iec(v) if _num(v) else "–"


def _r(v: Any) -> str:
    return number(v) if _num(v) else "–"


def _count(v: Any) -> str:
    """A count, exact, its thousands apart (`402,653,184`): not a byte figure."""
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else "–"


def findings(predicate: dict[str, Any]) -> Findings:
    """The deciding figures of one receipt's predicate."""
    check = str((predicate.get("check") or {}).get("name") or "")
    m = predicate.get("measurements") or {}
    params = (predicate.get("check") or {}).get("parameters") or {}
    kind = _KINDS.get(check)
    found = None
    if kind is not None and isinstance(m, dict):
        found = kind(m, params, predicate)
    return found or _recorded(check, m, predicate)


def _by(check: str) -> str:
    """Who read a receipt's figures: Ledger's own check, an importer, `ledger run`'s
    watch over a command, or (`ledger attest`) the harness that signed them."""
    if check.startswith("import-"):
        return "importer"
    if check == "command":
        return "command"
    return "check" if check in _KINDS else "harness"


def _recorded(check: str, m: Any, p: dict[str, Any]) -> Findings:
    """What a receipt records where it holds no figure its kind decides by (another
    harness's attested result, an infra-error before any measurement): its own scalars,
    and its measured/predicted where it names both."""
    scalars = [
        (k, v)
        for k, v in (m.items() if isinstance(m, dict) else [])
        if not isinstance(v, dict | list)
    ]
    name = check or "?"
    if not scalars:
        said = ", with the reason recorded above" if p.get("reason") else ""
        return Findings(
            (
                f"The check {name} records no measured figures: its outcome, "
                f"{p.get('outcome', '?')}, is all it says{said}.",
            ),
            by=_by(name),
        )
    table = Table(("figure", "value"), tuple((k, value(k, v)) for k, v in scalars[:_ROWS]))
    more = max(0, len(scalars) - _ROWS)
    pred, meas = m.get("predicted_bytes"), m.get("measured_bytes")
    if _num(pred) and _num(meas) and pred > 0:
        ratio = meas / pred
        lead = (
            f"The check {name} recorded measured {iec(meas)} against predicted {iec(pred)}, "
            f"measured/predicted {number(ratio)} (as its signer recorded them)."
        )
        return Findings((lead,), Table(table.columns, table.rows, (), more), ratio > 1, _by(name))
    lead = (
        f"The check {name} has no deciding figure Ledger knows; the first of its "
        f"{len(m)} recorded measurement{'s' if len(m) != 1 else ''} are beneath."
    )
    return Findings((lead,), Table(table.columns, table.rows, (), more), by=_by(name))


def _shape_rows(m: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in m.get("shapes") or [] if isinstance(r, dict)]


def _mark(r: dict[str, Any]) -> str:
    if r.get("counterexample") is True:
        return COUNTEREXAMPLE
    return REFUSED if r.get("admitted") is False else ""


def _admission(m: dict[str, Any], _: dict[str, Any], __: dict[str, Any]) -> Findings | None:
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
    if worst_of:
        w = max(worst_of, key=lambda r: float(r["measured_over_predicted"]))
        ratio = float(w["measured_over_predicted"])
        over = ratio > 1 or cx > 0
        lead = (
            f"Worst measured/predicted: {number(ratio)} at shape {w.get('shape')} "
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
    cols = ("shape", "phase", "predicted_bytes", "measured_bytes", "measured_over_predicted", "run")
    table = Table(
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
    return Findings((lead, counts), table if chosen else None, over)


_STEP = re.compile(r"^(prefix\d+|optimizer_step|target)_status$")


def _full_prefix(m: dict[str, Any], _: dict[str, Any], __: dict[str, Any]) -> Findings | None:
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


def _regression(m: dict[str, Any], params: dict[str, Any], _: dict[str, Any]) -> Findings | None:
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


def _gradient(m: dict[str, Any], params: dict[str, Any], _: dict[str, Any]) -> Findings | None:
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


def _mesh(m: dict[str, Any], _: dict[str, Any], __: dict[str, Any]) -> Findings | None:
    world = m.get("world_size")
    if not isinstance(world, int) or "mode" not in m:
        return None
    mode, tol = m.get("mode"), m.get("flat_tolerance_bytes")
    step = "keep" if mode == "keep" else "after_destroy"
    rows, marks, worst = [], [], None
    for r in range(world):
        d = m.get(f"rank{r}_{step}_outside_pool_bytes_delta")
        past = (_num(d) and _num(tol) and d > tol) or m.get(f"rank{r}_gather_matches") is False
        rows.append(
            (
                str(r),
                _b(m.get(f"rank{r}_keep_outside_pool_bytes_delta")),
                _b(m.get(f"rank{r}_first_allgather_outside_pool_bytes_delta")),
                _b(m.get(f"rank{r}_after_destroy_outside_pool_bytes_delta")),
                _b(tol),
                value("b", m.get(f"rank{r}_gather_matches")),
            )
        )
        marks.append(COUNTEREXAMPLE if past else "")
        if _num(d) and (worst is None or d > worst[1]):
            worst = (r, d)
    what = "in-place handoff" if mode == "keep" else "all-gather handoff, after destroy"
    if worst is None:
        lead = (
            f"Mode {mode} on {world} ranks ({m.get('backend')}): no memory outside the pool "
            "was measured."
        )
        over = None
    else:
        over = any(marks)
        lead = (
            f"Mode {mode} on {world} ranks ({m.get('backend')}): memory outside the pool grew at "
            f"most {_b(worst[1])} (rank {worst[0]}) across the {what}, against tolerance "
            f"{_b(tol)}."
        )
    matches = all(m.get(f"rank{r}_gather_matches") is True for r in range(world))
    second = (
        f"The gathered weight {'matches' if matches else 'does not match'} the shards on "
        "every rank."
    )
    cols = ("rank", "keep", "first all-gather", "after destroy", "tolerance", "gather matches")
    return Findings((lead, second), Table(cols, tuple(rows), tuple(marks)), over)


def _observer(m: dict[str, Any], _: dict[str, Any], __: dict[str, Any]) -> Findings | None:
    if "compared_keys" not in m:
        return None
    diffs = [d for d in m.get("differences") or [] if isinstance(d, dict)]
    lead = (
        f"The observer changed {len(diffs)} of {value('n', m['compared_keys'])} compared values "
        f"(observer on: {m.get('on_outcome')}, off: {m.get('off_outcome')})."
    )
    if diffs:
        rows = tuple(
            (
                str(d.get("key")),
                value(str(d.get("key")), d.get("on")),
                value(str(d.get("key")), d.get("off")),
            )
            for d in diffs[:_ROWS]
        )
        return Findings(
            (lead,), Table(("value", "on", "off"), rows, (COUNTEREXAMPLE,) * len(rows)), True
        )
    rows = (
        ("on", str(m.get("on_outcome")), value("duration_ns", m.get("duration_on_ns"))),
        ("off", str(m.get("off_outcome")), value("duration_ns", m.get("duration_off_ns"))),
    )
    return Findings((lead,), Table(("observer", "outcome", "duration"), rows), False)


_DELTA = re.compile(r"delta (-?\d+) > tolerance (\d+)")


def _cleanup(_: dict[str, Any], __: dict[str, Any], p: dict[str, Any]) -> Findings | None:
    c = p.get("cleanup")
    if not isinstance(c, dict):
        return None
    res = [r for r in c.get("resources") or [] if isinstance(r, dict)]
    held = [r for r in res if not r.get("released")]
    lead = (
        f"{len(res) - len(held)} of {len(res)} resources released "
        f"(tolerance {_b(c.get('tolerance_bytes') or 0)})."
    )
    if not held:
        after = (
            "."
            if p.get("outcome") == "passed"
            else "; the outcome is the run's own (its reason above)."
        )
        return Findings((lead, f"Nothing was left behind{after}"), over=False)
    said = []
    for r in held[:3]:
        d = _DELTA.search(str(r.get("proof", "")))
        grew = f" grew {iec(int(d.group(1)))} against {iec(int(d.group(2)))}" if d else ""
        said.append(f"{r.get('kind')} {r.get('id')}{grew}")
    more = f" and {len(held) - 3} more" if len(held) > 3 else ""
    return Findings((lead, f"Left behind: {'; '.join(said)}{more}."), over=True)


def _command(m: dict[str, Any], _: dict[str, Any], p: dict[str, Any]) -> Findings | None:
    if "exit_status" not in m:
        return None
    rc = m.get("exit_status")
    how = (
        f"was killed by {m['signal']}"
        if m.get("signal")
        else "timed out"
        if rc is None
        else f"exited with status {rc}"
    )
    leaked = [x for x in m.get("leaked_processes") or [] if isinstance(x, dict)]
    names = ", ".join(f"pid {x.get('pid')} ({x.get('comm')})" for x in leaked[:5])
    left = f"{len(leaked)} process{'es' if len(leaked) != 1 else ''} leaked" + (
        f": {names}" if names else ""
    )
    kept = len(p.get("artifacts") or [])
    refused = len(m.get("refused_outputs") or [])
    unmatched = len(m.get("artifact_globs_unmatched") or [])
    lead = (
        f"The command {how} after {value('duration_ns', m.get('duration_ns'))}; {left}; "
        f"{kept} declared output{'s' if kept != 1 else ''} kept, {refused} refused, "
        f"{unmatched} pattern{'s' if unmatched != 1 else ''} matched nothing."
    )
    rows: list[tuple[str, str]] = [
        ("exit status", value("n", rc)),
        ("duration", value("duration_ns", m.get("duration_ns"))),
        ("leaked processes", str(len(leaked))),
        ("declared outputs kept", str(kept)),
        ("outputs refused", str(refused)),
    ]
    before, after = m.get("nvml_used_before_bytes"), m.get("nvml_used_after_bytes")
    if isinstance(before, dict) and isinstance(after, dict):
        for gpu, b in before.items():
            a = after.get(gpu)
            rows.append((f"GPU memory used {gpu}", f"{_b(b)} before, {_b(a)} after"))
        memory = "GPU memory is read through NVML before and after (no peak is sampled)."
    else:
        memory = "No GPU memory was read (NVML did not answer): no peak is recorded."
    return Findings(
        (lead, memory),
        Table(("figure", "value"), tuple(rows)),
        bool(leaked) or rc != 0,
        by="command",
    )


def _junit(m: dict[str, Any], _: dict[str, Any], __: dict[str, Any]) -> Findings | None:
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


def _intoto(m: dict[str, Any], _: dict[str, Any], __: dict[str, Any]) -> Findings | None:
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


def _events(m: dict[str, Any], _: dict[str, Any], __: dict[str, Any]) -> Findings | None:
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


_Kind = Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], Findings | None]
_KINDS: dict[str, _Kind] = {
    "admission": _admission,
    "full-prefix-backward": _full_prefix,
    "regression-24view": _regression,
    "gradient-compare": _gradient,
    "mesh-handoff": _mesh,
    "observer-off-control": _observer,
    "cleanup": _cleanup,
    "command": _command,
    "import-junit": _junit,
    "import-in-toto": _intoto,
    "import-admission-events": _events,
}


_TERMINAL = {
    "predicted_bytes": "predicted",
    "measured_bytes": "measured",
    "measured_over_predicted": "measured/predicted",
}
"""Shorter column names where 80 columns are all there is (the page names the keys)."""
_CELL = 36
"""A terminal cell's most characters."""


def table_lines(f: Findings, width: int = 80) -> list[str]:
    """The findings' table as aligned text rows, the mark in the indent; columns
    past ``width`` are named beneath instead (the first always shows)."""
    t = f.table
    if t is None or not t.rows:
        return []
    cols = [_TERMINAL.get(c, c) for c in t.columns]
    # A long name (a tensor's) keeps its end, where the names differ.
    rows = [tuple(c if len(c) <= _CELL else "…" + c[1 - _CELL :] for c in r) for r in t.rows]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    shown, used = 0, 4
    while shown < len(cols) and used + widths[shown] + 2 <= width + 2:
        used += widths[shown] + 2
        shown += 1
    shown = max(shown, 1)
    fmt = "  ".join(f"{{:<{w}}}" for w in widths[:shown])
    out = ["    " + fmt.format(*cols[:shown]).rstrip()]
    for i, r in enumerate(rows):
        mark = t.marks[i] if i < len(t.marks) else ""
        out.append(f"  {mark or ' '} " + fmt.format(*r[:shown]).rstrip())
    if shown < len(cols):
        out.append(f"    also: {', '.join(cols[shown:])} (ledger show --json)")
    return out
