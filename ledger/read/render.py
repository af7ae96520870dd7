"""Plain-text renderings for people (the --json forms are the contract for scripts).

Every rendering is made inert on the way out (`ledger.read.inert`): the text
inside comes from signed statements, and a terminal must never act on it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ledger.read.humanize import (
    baseline,
    blocker_reason,
    environment_line,
    figures,
)
from ledger.read.plain import inert_rendering as _inert
from ledger.read.plain import one_line as _one_line
from ledger.read.plain import short
from ledger.read.plain import when as _when
from ledger.read.plain import wrap as _wrap
from ledger.read.render_show import render_show
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
    # Whose the blockers are, counted apart (introduced here, already on the base).
    if v.get("whose"):
        out += _wrap(v["whose"], width, "  ")
    out += _wrap(f"{doc['subject']['repo']} {_subject_line(doc['subject'])}", width, "  ", "    ")
    if doc.get("plan_source_text"):
        out += _wrap(f"plan source: {doc['plan_source_text']}", width, "  ", "    ")
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
    "infra-error": "[IE]",
    "stale": "[--]",
    "not-run": "[  ]",
    "not-applicable": "[na]",
}


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
        elif not mark and it.get("superseded_by_fix"):
            mark = " (superseded by the check's fix)"
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
            if it.get("superseded_by_fix"):
                lines += _wrap(_one_line(it["superseded_by_fix"]), width, "      ")
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
        if "hosts" in r:
            lines.append(f"{'':16}  hosts: {_hosts_said(r)}")
    return "".join(line + "\n" for line in lines)


def _hosts_said(r: dict[str, Any]) -> str:
    """A runner key's hosts, each with its declared GPUs' count, and where they come
    from when its registration did not name them."""
    hosts = r.get("hosts") or {}
    said = ", ".join(
        h + (f" ({len(g)} GPU{'s' if len(g) != 1 else ''})" if g else "")
        for h, g in sorted(hosts.items())
    )
    source = r.get("hosts_source")
    if source and source != "registered":
        return f"{said} ({source})" if said else str(source)
    return said or "none"


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
            none = "no receipt of this claim" + (" that counts" if t.void else "")
            out += _wrap(f"{none} on these revisions", width, "  ")
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
        # A void receipt is no point: listed after them, with no figure and with why.
        for v in t.void:
            out += _wrap(
                f"{'void':<14} {v.commit[:12]}  {'-':>10}  {v.outcome:<12} {short(v.receipt)}",
                width,
                "  ",
                "    ",
            )
            out += _wrap(f"{v.where}, not a point: {v.why}", width, "    ", "  ")
        out.append("")
    return "\n".join(out)
