"""Plain-text renderings for people (the --json forms are the contract for scripts)."""

from __future__ import annotations

from typing import Any

__all__ = ["render_history", "render_show", "short"]


def short(receipt_id: str) -> str:
    return receipt_id.removeprefix("sha256:")[:12]


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
    for s2 in p.get("supersedes", []):
        lines.append(f"supersedes {s2['id']}: {s2['reason']}")
    for r in doc.get("reviews", []):
        lines.append(f"review     {short(r['id'])} {r['verdict']}: {r.get('note', '')}")
    return "\n".join(lines)


def render_history(subject: dict[str, Any], items: list[dict[str, Any]]) -> str:
    head = f"PR #{subject['pr']} head" if subject.get("pr") else "commit"
    lines = [f"{subject['repo']} {head} {subject['commit'][:12]}: {len(items)} entries"]
    for it in items:
        mark = "SUPERSEDED " if it.get("superseded") else ""
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
            lines.append(f"        superseded by {short(s['id'])}: {s['reason']}")
        for p in it.get("problems", []):
            lines.append(f"        does not count: {p}")
    return "\n".join(lines) + "\n"
