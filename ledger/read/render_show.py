"""`ledger show`: a receipt or review for people, in 80 columns: what the check found,
what ran where, the conditions it holds for, every measurement (admission's shapes
marked ✘ and ⊘), and what it carries and what answers it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeGuard

from ledger.read.findings import COUNTEREXAMPLE, REFUSED, findings, table_lines
from ledger.read.humanize import columns, figures, sorted_rows, value
from ledger.read.plain import inert_rendering, one_line, short, when, wrap

__all__ = ["render_show"]


def _exact(key: str, v: Any) -> str:
    """A value for people, with the exact integer beside bytes and durations."""
    text = value(key, v)
    if isinstance(v, int) and not isinstance(v, bool) and text != str(v):
        return f"{text} ({v})"
    return text


def _flat(prefix: str, v: Any) -> list[tuple[str, Any]]:
    """A nested dict as dotted keys (lists of scalars stay one value)."""
    if isinstance(v, dict):
        out: list[tuple[str, Any]] = []
        for k, x in v.items():
            out += _flat(f"{prefix}.{k}" if prefix else str(k), x)
        return out
    if isinstance(v, list) and not any(isinstance(x, dict | list) for x in v):
        return [(prefix, ", ".join(value(prefix, x) for x in v) or "[]")]
    return [(prefix, v)]


def _table(
    name: str,
    rows: list[dict[str, Any]],
    width: int,
    mark: Callable[[dict[str, Any]], str] | None = None,
) -> list[str]:
    """A list of records as an aligned text table, key columns first; columns
    that do not fit `width` are named beneath (`--json` has them all). ``mark``
    gives a row a one-letter mark in its indent."""
    cols = columns(name, rows)
    rows = sorted_rows(name, rows)
    cells = [[one_line(value(c, r.get(c)), 24) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    shown, used = 0, 4
    while shown < len(cols) and used + widths[shown] + 2 <= width:
        used += widths[shown] + 2
        shown += 1
    shown = max(shown, 1)
    fmt = "    " + "  ".join(f"{{:<{w}}}" for w in widths[:shown])
    out = [fmt.format(*cols[:shown]).rstrip()]
    for r, row in zip(rows, cells, strict=True):
        line = fmt.format(*row[:shown]).rstrip()[:width]
        m = mark(r) if mark else ""
        out.append(f"  {m} {line[4:]}" if m else line)
    if shown < len(cols):
        out += wrap(f"also: {', '.join(cols[shown:])} (ledger show --json)", width, "    ")
    return out


@inert_rendering
def render_show(doc: dict[str, Any], *, width: int = 80) -> str:
    """A receipt or review for people: values in units (exact integers beside
    them), nested measurements as tables with the key evidence first."""
    p = doc["statement"]["predicate"]
    s = doc["signer"]
    lines = [f"{doc['kind']} {doc['id']}"]
    lines += wrap(f"logged     entry {doc['seq']} at {doc['logged_at']}", width, "")
    lines += wrap(f"signed by  {s['name']} ({s['role']}) key {s['keyid'][:16]}", width, "")
    if doc["kind"] == "review":
        lines += [f"reviews    {p['receipt']}", f"verdict    {p['verdict']}"]
        lines += wrap(f"note       {p.get('note') or '-'}", width, "", "           ")
        return "\n".join(lines) + "\n"
    rev = doc.get("revocation")
    if rev:
        # First, before what the receipt says: from its revocation on it says nothing.
        # Not weighed where the plan has a say but none was found: said so, beside it.
        weighed = str(rev.get("weighed") or "")
        unweighed = f"; {weighed}" if weighed.startswith("not weighed") else ""
        lines += wrap(
            f"{one_line(rev['text'], 2000)} (revocation at entry {rev['seq']}{unweighed})",
            width,
            "",
            "  ",
        )
    lines += _show_found(p, width)
    lines += _show_label(doc.get("attribution"), width)
    lines += _show_source(p, width)
    lines += _show_conditions(p, width)
    lines += _show_measurements(p.get("measurements") or {}, width)
    lines += _show_attached(p, doc.get("reviews", []), width)
    return "\n".join(lines) + "\n"


def _show_found(p: dict[str, Any], width: int) -> list[str]:
    """The claim, its check and outcome with the reason, and what the check found."""
    lines = [
        f"claim      {p['claim']}",
        f"check      {p['check']['name']} version {p['check']['version']}",
    ]
    lines += wrap(f"outcome    {p['outcome']}", width, "")
    if p.get("reason"):
        lines += wrap(
            f"reason     {one_line(figures(p['reason']), 2000)}", width, "", "           "
        )
    return lines + _decided(p, width) + _fixed(p, width) + _found(p, width)


def _decided(p: dict[str, Any], width: int) -> list[str]:
    """The one figure that decided it against its bound, said as the receipt page, the
    blocker's trend link and the trend say it (`ledger.qualification.deciding`)."""
    from ledger.qualification.deciding import deciding_of

    d = deciding_of(p)
    if d is None or d.bound is None:
        return []
    return wrap(f"decided    by {d.text}", width, "", "           ")


def _show_label(a: Any, width: int) -> list[str]:
    """Whose failure it is (`read/whose.py`), as `status` says it of its blocker."""
    if not isinstance(a, dict) or not a.get("text"):
        return []
    return wrap(f"baseline   {one_line(figures(str(a['text'])), 2000)}", width, "", "           ")


def _fixed(p: dict[str, Any], width: int) -> list[str]:
    """A failure a later version of its check no longer makes: said under its outcome
    (`ledger.qualification.check_fixes`; the receipt itself keeps what it signed)."""
    from ledger.qualification import check_fixes

    c = p["check"]
    fix = check_fixes.fixed_by(
        c["name"],
        str(c["version"]),
        c.get("parameters") or {},
        p["outcome"],
        p.get("reason"),
        p.get("measurements") or {},
    )
    if fix is None:
        return []
    text = check_fixes.superseded_text(fix, str(c["version"]))
    return wrap(f"verdict    {text}", width, "", "           ")


def _show_source(p: dict[str, Any], width: int) -> list[str]:
    """What was run and where: the repository, commit, tree and package, the observer,
    and the host and times it ran."""
    src = p["source"]
    pkg = (src.get("package") or {}).get("digest")
    lines = wrap(
        f"repo       {src['repo']}" + (f" PR #{src['pr']}" if src.get("pr") else ""), width, ""
    )
    lines += [
        f"commit     {src['commit']}",
        f"tree       {src['tree']}",
        f"package    {pkg or '-'}",
        f"dirty      {'yes' if src.get('dirty') else 'no'}",
        f"observer   {p['observer']}",
    ]
    runner = p.get("runner") or {}
    lines += wrap(
        f"ran        {when(runner.get('started'))} to {when(runner.get('finished'))} UTC"
        # A supersession or an import records no host: said in words, not "?".
        f" on {runner.get('host') or 'a host not recorded'}",
        width,
        "",
    )
    return lines


def _show_conditions(p: dict[str, Any], width: int) -> list[str]:
    """The scope it holds for, the check's parameters, and the cleanup's proof."""
    lines = ["scope"]
    for k, v in (p.get("scope") or {"(any)": ""}).items():
        lines += wrap(f"{k} = {_exact(k, v)}" if v != "" else k, width, "    ")
    params = _flat("", p["check"].get("parameters") or {})
    if params:
        lines.append("parameters")
        for k, v in params:
            lines += wrap(f"{k} = {_exact(k, v)}", width, "    ", "      ")
    c = p.get("cleanup")
    if c is None:
        lines.append("cleanup    no proof")
    else:
        lines.append(f"cleanup    {'complete' if c['complete'] else 'INCOMPLETE'}")
        for r in c["resources"]:
            mark = "released" if r["released"] else "LEFT"
            lines += wrap(f"{r['kind']} {r['id']}: {mark} {r.get('proof', '')}", width, "    ")
    return lines


def _show_measurements(m: dict[str, Any], width: int) -> list[str]:
    """Every measurement: admission's shapes marked, lists of rows as tables, the
    rest one exact value a line."""
    if not m:
        return []
    lines = ["measurements"]
    for k, v in m.items():
        if k == "shapes" and isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            lines += _shapes(v, width)
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            lines.append(f"  {k} ({len(v)} rows)")
            lines += _table(k, v, width)
        else:
            for fk, fv in _flat(k, v):
                lines += wrap(f"{fk} = {one_line(_exact(fk, fv))}", width, "    ", "      ")
    return lines


def _show_attached(p: dict[str, Any], reviews: list[dict[str, Any]], width: int) -> list[str]:
    """What the receipt carries and what answers it: artifacts, the receipts it
    supersedes, its reviews."""
    lines: list[str] = []
    for a in p.get("artifacts", []):
        lines += wrap(
            f"artifact   {a['name']} sha256:{a['digest']['sha256'][:16]} "
            f"{_exact('size_bytes', a['size'])} {a['mediaType']}",
            width,
            "",
        )
    for s2 in p.get("supersedes", []):
        lines += wrap(f"supersedes {s2['id']}: {s2['reason']}", width, "")
    for r in reviews:
        lines += wrap(f"review     {short(r['id'])} {r['verdict']}: {r.get('note', '')}", width, "")
    return lines


def _found(p: dict[str, Any], width: int) -> list[str]:
    """What the check found, as the receipt page says it (`ledger.read.findings`):
    its sentences, then the rows behind them, marked ✘ and ⊘."""
    f = findings(p)
    out: list[str] = []
    for i, sentence in enumerate(f.sentences):
        out += wrap(
            ("found      " if i == 0 else "           ") + sentence, width, "", "           "
        )
    out += table_lines(f, width)
    if f.table is not None and f.table.more:
        out.append(f"    and {f.table.more} more rows (beneath, under measurements)")
    return out


def _num(v: object) -> TypeGuard[int | float]:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _shape_mark(r: dict[str, Any]) -> str:
    """✘ a counterexample (admitted, then over its prediction or out of memory), ⊘ a
    refused shape, as the receipt page marks them; an admitted shape that fit is not
    marked."""
    if r.get("counterexample") is True:
        return COUNTEREXAMPLE
    return REFUSED if r.get("admitted") is False else ""


def _shape_said(r: dict[str, Any]) -> str:
    """A marked shape in one line, with its ratio: measured over predicted for a
    counterexample; predicted over usable (why it was refused) for a refusal, and
    measured over predicted where the refused shape was measured too."""
    where = " ".join(str(r[k]) for k in ("shape", "phase") if r.get(k) is not None)
    pred, meas, ratio = (
        r.get("predicted_bytes"),
        r.get("measured_bytes"),
        r.get("measured_over_predicted"),
    )
    status = r.get("status")
    note = f" (status {status})" if status not in (None, "ok") else ""
    if _shape_mark(r) == COUNTEREXAMPLE:
        what = f"{COUNTEREXAMPLE} counterexample: {where}"
        if r.get("run"):
            what += f" ({r['run']})"
        if _num(meas) and _num(pred) and _num(ratio):
            what += (
                f": measured {value('measured_bytes', meas)} / predicted "
                f"{value('predicted_bytes', pred)} = {value('ratio', float(ratio))}"
            )
        return what + note
    usable = r.get("usable_bytes")
    what = f"{REFUSED} refused: {where}"
    if _num(pred) and _num(usable) and usable > 0:
        what += (
            f": predicted {value('predicted_bytes', pred)} / usable "
            f"{value('usable_bytes', usable)} = {value('ratio', pred / usable)}"
        )
    if _num(ratio):
        what += f"; measured/predicted {value('ratio', float(ratio))}"
    if r.get("over_refused") is True:
        what += "; it fit: an over-refusal"
    return what + note


def _shapes(rows: list[dict[str, Any]], width: int) -> list[str]:
    """An admission receipt's shapes: the table, its counterexample and refused rows
    marked (✘, ⊘) and each said beneath with its ratio, which the table's 80 columns
    leave out."""
    marked = [r for r in rows if _shape_mark(r)]
    cx = sum(_shape_mark(r) == COUNTEREXAMPLE for r in rows)
    counts = [f"{cx} counterexample{'s' if cx != 1 else ''}"] if cx else []
    if len(marked) > cx:
        counts.append(f"{len(marked) - cx} refused")
    head = f"  shapes ({len(rows)} rows" + (f": {', '.join(counts)})" if counts else ")")
    out = [head, *_table("shapes", rows, width, _shape_mark)]
    for r in marked:
        out += wrap(_shape_said(r), width, "    ", "      ")
    return out
