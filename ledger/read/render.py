"""Plain-text renderings for people (the --json forms are the contract for scripts).

Every rendering is made inert on the way out (`ledger.read.inert`): the text
inside comes from signed statements, and a terminal must never act on it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeGuard

from ledger.read.findings import COUNTEREXAMPLE, REFUSED, findings, table_lines
from ledger.read.humanize import (
    baseline,
    blocker_reason,
    columns,
    environment_line,
    figures,
    sorted_rows,
    value,
)
from ledger.read.inert import inert
from ledger.read.render_verification import render_verification

if TYPE_CHECKING:
    from ledger.qualification import StatusReport
    from ledger.trend import Trend

__all__ = [
    "render_checks",
    "render_history",
    "render_keys",
    "render_qualify",
    "render_show",
    "render_status",
    "render_table",
    "render_trend",
    "render_verification",
    "short",
    "terminal_width",
]


_P = ParamSpec("_P")


def _inert(fn: Callable[_P, str]) -> Callable[_P, str]:
    @functools.wraps(fn)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> str:
        return inert(fn(*args, **kwargs))

    return run


def short(receipt_id: str) -> str:
    return receipt_id.removeprefix("sha256:")[:12]


_REASON_CAP = 240
"""Characters of one reason in the terminal; `ledger show ID` prints it whole."""


def _one_line(text: str, cap: int = _REASON_CAP) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= cap else flat[: cap - 1] + "…"


def _wrap(text: str, width: int, indent: str, hang: str = "  ") -> list[str]:
    import textwrap  # here: `ledger verify` renders without it

    return textwrap.wrap(
        text,
        width,
        initial_indent=indent,
        subsequent_indent=indent + hang,
        break_long_words=True,
        break_on_hyphens=False,
    ) or [indent]


def terminal_width() -> int:
    """The terminal's width on a TTY, else 80 (a pipe, a CI log)."""
    import shutil
    import sys

    return shutil.get_terminal_size((80, 24)).columns if sys.stdout.isatty() else 80


def _subject_line(subject: dict[str, Any]) -> str:
    head = (
        f"PR #{subject['pr']} head {subject['commit'][:12]}"
        if subject.get("pr") is not None
        else f"commit {subject['commit'][:12]}"
    )
    return f"{head} (tree {subject['tree'][:12]})"


@_inert
def render_status(doc: dict[str, Any], *, width: int = 80) -> str:
    """A status answer for people, from its JSON document (local or a server's).

    The headline and the blockers first, each with the command to run next;
    then one block per claim: its state at the required scope, the reasons
    that decide it (wrapped, indented under the claim), and each receipt with
    what it means here and where it ran. Nothing is wider than `width`.
    """
    v = doc["verdict"]
    out: list[str] = []
    out += _wrap(v["headline"], width, "")
    out += _wrap(f"{doc['subject']['repo']} {_subject_line(doc['subject'])}", width, "  ", "    ")
    for note in doc.get("judged", []):
        out += _wrap(note, width, "  ")
    for problem in doc.get("problems", []):
        out += _wrap(f"problem: {_one_line(problem)}", width, "  ")
    if doc.get("scope"):
        asked = ",".join(f"{k}={x}" for k, x in sorted(doc["scope"].items()))
        out += _wrap(f"asked at scope {asked}", width, "  ")
    if v["blockers"]:
        out += ["", "Blocking:"]
        once = v.get("run_once") or {"claims": []}
        for i, b in enumerate(v["blockers"], 1):
            out += _wrap(
                f"{i}. {b['claim']}: {b['state']} (scope: {b['scope_text']})", width, "  ", "   "
            )
            # The reason first, so the next command reads as its answer.
            if why := blocker_reason(b.get("reasons", [])):
                out += _wrap(f"why: {why}", width, "     ", "       ")
            # Whose failure it is: it explains, the state above still decides.
            if label := baseline(b):
                out += _wrap(f"baseline: {label}", width, "     ", "       ")
            if b["claim"] not in once["claims"]:
                out += _wrap(f"next: {b['next']}", width, "     ")
        if once["claims"]:
            # One run records evidence for all of them: one command, not one each.
            out += _wrap(
                f"next, for {len(once['claims'])} of them: `{once['command']}`", width, "  ", "    "
            )
    # Where the evidence ran, once: a receipt line repeats it only where it differs.
    envs = [environment_line(r["environment"]) for c in v["claims"] for r in c["receipts"]]
    common = envs[0] if envs and all(e == envs[0] for e in envs) else None
    if common:
        out += ["", *_wrap(f"All evidence ran on: {common}", width, "", "  ")]
    out += ["", "Claims:"]
    for c in v["claims"]:
        optional = "" if c["required"] else " (optional)"
        via = f" via {c['via']}" if c["via"] else ""
        out.append("")
        out += _wrap(f"{_MARK.get(c['state'], '[?]')} {c['claim']}{optional}", width, "")
        out += _wrap(f"{c['state']}{via} at scope {c['scope_text']}", width, "    ")
        for reason in c["reasons"]:
            out += _wrap(f"- {_one_line(figures(reason))}", width, "    ")
        for r in c["receipts"]:
            out += _wrap(
                f"{r['short']} {r['outcome']} -> {r['meaning_text']}", width, "    receipt ", "  "
            )
            env = environment_line(r["environment"])
            when = (r.get("recorded") or "")[:16].replace("T", " ")
            shown = (when, f"commit {r['commit'][:12]}", "" if env == common else env)
            detail = ", ".join(x for x in shown if x)
            out += _wrap(detail, width, "      ")
    return "\n".join(line.rstrip() for line in out) + "\n"


def render_table(report: StatusReport, *, width: int | None = None, color: bool = False) -> str:
    """A local status report for people: `render_status` over its `to_json()`.

    At most `width` columns (default: the terminal's, 80 when not a TTY).
    `color` is accepted for compatibility; states are marked by text.
    """
    return render_status(report.to_json(), width=terminal_width() if width is None else width)


# States by a mark as well as a word, so they read without colour.
_MARK = {
    "qualified": "[ok]",
    "failed": "[XX]",
    "disputed": "[XX]",
    "needs-review": "[..]",
    "unverified": "[!!]",
    "inconclusive": "[??]",
    "stale": "[--]",
    "not-run": "[  ]",
    "not-applicable": "[na]",
}


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
    cells = [[_one_line(value(c, r.get(c)), 24) for c in cols] for r in rows]
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
        out += _wrap(f"also: {', '.join(cols[shown:])} (ledger show --json)", width, "    ")
    return out


@_inert
def render_show(doc: dict[str, Any], *, width: int = 80) -> str:
    """A receipt or review for people: values in units (exact integers beside
    them), nested measurements as tables with the key evidence first."""
    p = doc["statement"]["predicate"]
    s = doc["signer"]
    lines = [f"{doc['kind']} {doc['id']}"]
    lines += _wrap(f"logged     entry {doc['seq']} at {doc['logged_at']}", width, "")
    lines += _wrap(f"signed by  {s['name']} ({s['role']}) key {s['keyid'][:16]}", width, "")
    if doc["kind"] == "review":
        lines += [f"reviews    {p['receipt']}", f"verdict    {p['verdict']}"]
        lines += _wrap(f"note       {p.get('note') or '-'}", width, "", "           ")
        return "\n".join(lines) + "\n"
    lines += _show_found(p, width)
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
    lines += _wrap(f"outcome    {p['outcome']}", width, "")
    if p.get("reason"):
        lines += _wrap(
            f"reason     {_one_line(figures(p['reason']), 2000)}", width, "", "           "
        )
    return lines + _found(p, width)


def _show_source(p: dict[str, Any], width: int) -> list[str]:
    """What was run and where: the repository, commit, tree and package, the observer,
    and the host and times it ran."""
    src = p["source"]
    pkg = (src.get("package") or {}).get("digest")
    lines = _wrap(
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
    lines += _wrap(
        f"ran        {_when(runner.get('started'))} to {_when(runner.get('finished'))} UTC"
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
        lines += _wrap(f"{k} = {_exact(k, v)}" if v != "" else k, width, "    ")
    params = _flat("", p["check"].get("parameters") or {})
    if params:
        lines.append("parameters")
        for k, v in params:
            lines += _wrap(f"{k} = {_exact(k, v)}", width, "    ", "      ")
    c = p.get("cleanup")
    if c is None:
        lines.append("cleanup    no proof")
    else:
        lines.append(f"cleanup    {'complete' if c['complete'] else 'INCOMPLETE'}")
        for r in c["resources"]:
            mark = "released" if r["released"] else "LEFT"
            lines += _wrap(f"{r['kind']} {r['id']}: {mark} {r.get('proof', '')}", width, "    ")
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
                lines += _wrap(f"{fk} = {_one_line(_exact(fk, fv))}", width, "    ", "      ")
    return lines


def _show_attached(p: dict[str, Any], reviews: list[dict[str, Any]], width: int) -> list[str]:
    """What the receipt carries and what answers it: artifacts, the receipts it
    supersedes, its reviews."""
    lines: list[str] = []
    for a in p.get("artifacts", []):
        lines += _wrap(
            f"artifact   {a['name']} sha256:{a['digest']['sha256'][:16]} "
            f"{_exact('size_bytes', a['size'])} {a['mediaType']}",
            width,
            "",
        )
    for s2 in p.get("supersedes", []):
        lines += _wrap(f"supersedes {s2['id']}: {s2['reason']}", width, "")
    for r in reviews:
        lines += _wrap(
            f"review     {short(r['id'])} {r['verdict']}: {r.get('note', '')}", width, ""
        )
    return lines


def _found(p: dict[str, Any], width: int) -> list[str]:
    """What the check found, as the receipt page says it (`ledger.read.findings`):
    its sentences, then the rows behind them, marked ✘ and ⊘."""
    f = findings(p)
    out: list[str] = []
    for i, sentence in enumerate(f.sentences):
        out += _wrap(
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
        out += _wrap(_shape_said(r), width, "    ", "      ")
    return out


def _when(iso: Any) -> str:
    """`2026-11-30T04:10:55Z` -> `2026-11-30 04:10` (UTC, as recorded)."""
    return str(iso or "")[:16].replace("T", " ")


@_inert
def render_history(subject: dict[str, Any], items: list[dict[str, Any]], *, width: int = 80) -> str:
    """Every entry in log order: sequence, short id, when it was recorded, what it
    says; details indented beneath (full ids in `--json`)."""
    # Lazily: `ledger verify FILE` renders through this module and needs no engine.
    from ledger.qualification.supersession import SUPERSESSION_PENDING

    head = f"PR #{subject['pr']} head" if subject.get("pr") else "commit"
    lines = _wrap(
        f"{subject['repo']} {head} {subject['commit'][:12]}: {len(items)} entries", width, ""
    )
    for it in items:
        mark = " SUPERSEDED" if it.get("superseded") else ""
        if it.get("supersession_pending"):
            mark = f" ({SUPERSESSION_PENDING})"
        if it["kind"] == "receipt":
            src = it.get("source", {})
            lines += _wrap(
                f"{it['seq']:>4}  {short(it['id'])}  {_when(it.get('recorded'))}  "
                f"{it['claim']}: {it['outcome']}{mark}",
                width,
                "",
                "      ",
            )
            env = environment_line(it.get("scope", {}))
            detail = f"commit {str(src.get('commit', ''))[:12]}, observer {it['observer']}"
            lines += _wrap(detail + (f", {env}" if env else ""), width, "      ")
            if it.get("reason"):
                lines += _wrap(f"reason: {_one_line(figures(it['reason']))}", width, "      ")
        else:
            note = f": {_one_line(it['note'])}" if it.get("note") else ""
            lines += _wrap(
                f"{it['seq']:>4}  {short(it['id'])}  review of {short(it.get('receipt', ''))}: "
                f"{it.get('verdict')}{mark}{note}",
                width,
                "",
                "      ",
            )
        for s in it.get("supersedes", []):
            lines += _wrap(f"supersedes {short(s['id'])}: {s['reason']}", width, "      ")
        for s in it.get("superseded_by", []):
            if s.get("effect", "effective") == "effective":
                text = f"superseded by {short(s['id'])}: {s['reason']}"
            else:
                text = s.get("why") or s["reason"]
            lines += _wrap(_one_line(text), width, "      ")
        for p in it.get("problems", []):
            lines += _wrap(f"does not count: {p}", width, "      ")
    return "\n".join(lines) + "\n"


@_inert
def render_keys(rows: list[dict[str, Any]]) -> str:
    lines = []
    for r in rows:
        state = f"revoked: {r['revoked_reason']}" if r["revoked"] else "active"
        mine = " (private key here)" if r["private_key_here"] else ""
        lines.append(f"{r['keyid'][:16]}  {r['role']:<8}  {r['name']:<16}  {state}{mine}")
    return "".join(line + "\n" for line in lines)


@_inert
def render_qualify(receipts: list[dict[str, Any]], report: StatusReport | None) -> str:
    """The receipts a qualify run recorded, then the status table (when the ledger is local)."""
    out = "".join(f"{r['id']}  {r['claim']}  {r['outcome']}\n" for r in receipts)
    if report is None:
        return out
    return out + "\n" + render_table(report)


def _plain(text: str) -> str:
    """Docstring markup as plain text: reST ``literal`` (and Markdown `code`)
    spans in plain quotes."""
    import re

    return re.sub(r"``([^`]+)``", r"'\1'", str(text))


@_inert
def render_checks(catalog: list[dict[str, Any]], *, width: int = 80) -> str:
    """`ledger checks`: each check, then one line per parameter and its meaning,
    wrapped at `width` (the terminal's)."""
    out = []
    for c in catalog:
        out += _wrap(f"{c['name']} (version {c['version']}): {_plain(c['summary'])}", width, "")
        for p in c["params"]:
            out += _wrap(
                f"{p['name']}: {p['type']} = {json.dumps(p['default'])}", width, "    ", "    "
            )
            if p.get("doc"):
                out += _wrap(_plain(p["doc"]), width, "        ", "")
        out.append("")
    return "\n".join(out)


@_inert
def render_trend(repo: str, pr: int | None, trends: list[Trend], *, width: int = 80) -> str:
    """`ledger trend`: per claim, its figure on each revision (base commits oldest
    first, then the PR's heads), with the receipt that measured it; under each head
    its change in % against the newest base receipt of the same scope (or why there
    is none), and admission's least measured/predicted against the base's."""
    from ledger.trend.series import compared_scope, scope_text

    out: list[str] = []
    for t in trends:
        head = f"{t.claim}: {t.name or 'no figure recorded'}"
        where = f"PR #{pr} of {repo}" if pr is not None else repo
        out += _wrap(f"{head} ({where}; last {t.base_asked} base commits)", width, "")
        if not t.points:
            out += _wrap("no receipt of this claim on these revisions", width, "  ")
        elif t.base_asked and not t.base_with_receipts:
            # Said, or the heads' figures read as if the base had been compared.
            out += _wrap(str(t.no_base), width, "  ")
        rows = [q for point in t.points for q in (point, *point.superseded)]
        # A head is compared within its scope: said on each row only where they differ.
        scopes = {scope_text(compared_scope(p.scope)) for p in rows}
        # A superseded receipt beneath its revision's point, with the figure it measured.
        for p in rows:
            fig = p.figure.text if p.figure else "-"
            out += _wrap(
                f"{p.where:<14} {p.commit[:12]}  {fig:>10}  {p.outcome:<12} {short(p.receipt)}",
                width,
                "  ",
                "    ",
            )
            if len(scopes) > 1:
                out += _wrap(f"at {scope_text(compared_scope(p.scope))}", width, "    ", "  ")
            if p.where == "base":
                continue
            change = t.change(p)
            # Where the base has no receipt at all, the line above the rows says so.
            if change is not None and (change.base is not None or t.no_base is None):
                out += _wrap(change.text, width, "    ", "  ")
            # A head's tightness against the base: a looser estimate passes admission
            # (it stays safe) unless a plan bounds it, so its change is said here.
            least = t.change(p, least=True)
            if least is not None:
                out += _wrap(least.least_text, width, "    ", "  ")
        out.append("")
    return "\n".join(out)
