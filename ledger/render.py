"""Plain-text renderings for people (the --json forms are the contract for scripts).

Every rendering is made inert on the way out (`ledger.inert`): the text
inside comes from signed statements, and a terminal must never act on it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec

from ledger.inert import inert
from ledger.qualification.supersession import SUPERSESSION_PENDING

if TYPE_CHECKING:
    from ledger.qualification import StatusReport

__all__ = [
    "render_checks",
    "render_history",
    "render_keys",
    "render_qualify",
    "render_show",
    "render_verification",
    "short",
]


_P = ParamSpec("_P")


def _inert(fn: Callable[_P, str]) -> Callable[_P, str]:
    @functools.wraps(fn)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> str:
        return inert(fn(*args, **kwargs))

    return run


def short(receipt_id: str) -> str:
    return receipt_id.removeprefix("sha256:")[:12]


@_inert
def render_show(doc: dict[str, Any]) -> str:
    st = doc["statement"]
    p = st["predicate"]
    lines = [f"{doc['kind']} {doc['id']}  (entry {doc['seq']}, logged {doc['logged_at']})"]
    s = doc["signer"]
    lines.append(f"signed by  {s['name']} ({s['role']}) {s['keyid'][:16]}")
    if doc["kind"] == "review":
        lines += [
            f"reviews    {p['receipt']}",
            f"verdict    {p['verdict']}",
            f"note       {p['note']}",
        ]
        return "\n".join(lines)
    src = p["source"]
    lines += [
        f"claim      {p['claim']}",
        f"check      {p['check']['name']} v{p['check']['version']}",
        f"outcome    {p['outcome']}" + (f": {p['reason']}" if p.get("reason") else ""),
        f"source     {src['repo']} commit {src['commit'][:12]} tree {src['tree'][:12]}"
        + (f" PR {src['pr']}" if src.get("pr") else "")
        + (" DIRTY" if src["dirty"] else ""),
        "scope      " + (", ".join(f"{k}={v}" for k, v in p["scope"].items()) or "(none)"),
        f"observer   {p['observer']}",
    ]
    c = p.get("cleanup")
    if c is None:
        lines.append("cleanup    no proof")
    else:
        lines.append(f"cleanup    {'complete' if c['complete'] else 'INCOMPLETE'}")
        for r in c["resources"]:
            mark = "released" if r["released"] else "LEFT"
            lines.append(f"             {r['kind']} {r['id']}: {mark}  {r.get('proof', '')}")
    for k, v in p.get("measurements", {}).items():
        lines.append(f"  {k} = {v}")
    for a in p.get("artifacts", []):
        lines.append(
            f"artifact   {a['name']} sha256:{a['digest']['sha256'][:16]} "
            f"{a['size']} bytes {a['mediaType']}"
        )
    for s2 in p.get("supersedes", []):
        lines.append(f"supersedes {s2['id']}: {s2['reason']}")
    for r in doc.get("reviews", []):
        lines.append(f"review     {short(r['id'])} {r['verdict']}: {r.get('note', '')}")
    return "\n".join(lines)


@_inert
def render_history(subject: dict[str, Any], items: list[dict[str, Any]]) -> str:
    head = f"PR #{subject['pr']} head" if subject.get("pr") else "commit"
    lines = [f"{subject['repo']} {head} {subject['commit'][:12]}: {len(items)} entries"]
    for it in items:
        mark = "SUPERSEDED " if it.get("superseded") else ""
        if it.get("supersession_pending"):
            mark = f"({SUPERSESSION_PENDING}) "
        if it["kind"] == "receipt":
            src = it.get("source", {})
            scope = ", ".join(f"{k}={v}" for k, v in it.get("scope", {}).items()) or "-"
            lines.append(
                f"{it['seq']:>6}  {short(it['id'])}  {mark}{it['claim']}  {it['outcome']}"
                f"  commit {str(src.get('commit', ''))[:12]}  [{scope}]  observer {it['observer']}"
            )
            if it.get("reason"):
                lines.append(f"        reason: {it['reason']}")
        else:
            lines.append(
                f"{it['seq']:>6}  {short(it['id'])}  review of {short(it.get('receipt', ''))}:"
                f" {it.get('verdict')}  {it.get('note', '')}"
            )
        for s in it.get("supersedes", []):
            lines.append(f"        supersedes {short(s['id'])}: {s['reason']}")
        for s in it.get("superseded_by", []):
            if s.get("effect", "effective") == "effective":
                lines.append(f"        superseded by {short(s['id'])}: {s['reason']}")
            else:
                lines.append(f"        {s.get('why') or s['reason']}")
        for p in it.get("problems", []):
            lines.append(f"        does not count: {p}")
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
    from ledger.qualification import render_table

    return out + "\n" + render_table(report)


@_inert
def render_verification(doc: dict[str, Any]) -> str:
    """A verification report (`VerificationReport.to_json`) for people."""
    s = doc["signer"]
    log = doc["log"]
    subj = doc.get("subject") or {}
    scope = doc.get("scope") or {}
    head = "verified" if doc.get("verified", True) else "NOT the receipt expected"
    if doc.get("trust") == "server":
        # Nothing was checked here: say whose word it is, never "verified".
        head = "the server reports" if doc.get("verified", True) else "NOT the receipt expected:"
    lines = [
        f"{head} {doc['id']}",
        f"  kind: {doc['kind']}",
        f"  subject: {subj.get('repo')} commit {str(subj.get('commit'))[:12]}"
        f" tree {str(subj.get('tree'))[:12]}" + (f" PR {subj['pr']}" if subj.get("pr") else ""),
        f"  claim: {doc['claim']}",
        f"  outcome: {doc['outcome']}",
        "  scope: " + (", ".join(f"{k}={v}" for k, v in scope.items()) or "(any)"),
        f"  signer: {s['name']} ({s['keyid'][:12]}, {s['role']})",
        f"  anchor: {doc['anchor']}",
        f"  log: entry {log['index']} of {log['size']}"
        + (f" in {log['origin']}" if log.get("origin") else "")
        + f", inclusion {log['inclusion']}",
    ]
    for r in doc.get("reviews", []):
        lines.append(
            f"  review {r['id'][:19]}: {r['verdict']} by {_who(r['signer'])} at {r.get('reviewed')}"
        )
    for r in doc.get("unanchored_reviews", []):
        lines.append(
            f"  unanchored review {r['id'][:19]}: {r['verdict']} by {_who(r['signer'])}"
            " (its log is not vouched for by a trusted ledger key; not counted)"
        )
    for step in doc.get("steps", []):
        lines.append(f"  checked: {step}")
    return "".join(line + "\n" for line in lines)


def _who(signer: dict[str, Any]) -> str:
    return f"{signer.get('name') or '?'} ({str(signer['keyid'])[:12]})"


@_inert
def render_checks(catalog: list[dict[str, Any]]) -> str:
    """`ledger checks`: each check, then one line per parameter and its meaning."""
    out = []
    for c in catalog:
        out.append(f"{c['name']} (version {c['version']}): {c['summary']}")
        for p in c["params"]:
            out.append(f"    {p['name']}: {p['type']} = {json.dumps(p['default'])}")
            if p.get("doc"):
                out.append(f"        {p['doc']}")
        out.append("")
    return "\n".join(out)
