"""The verification report for people (`ledger verify` without --json).

Apart from `ledger.read.render`, which holds every other rendering: `ledger verify
BUNDLE` starts fast, and compiling or loading those costs it time for nothing.
Made inert on the way out, as every rendering is (`ledger.read.inert`).
"""

from __future__ import annotations

from typing import Any

from ledger.read.inert import inert

__all__ = ["render_verification"]


def render_verification(doc: dict[str, Any]) -> str:
    """A verification report (`VerificationReport.to_json`) for people."""
    s = doc["signer"]
    log = doc["log"]
    subj = doc.get("subject") or {}
    scope = doc.get("scope") or {}
    head = "verified" if doc.get("verified", True) else "NOT the receipt expected"
    if not doc.get("verified", True) and not doc.get("mismatches"):
        head = "NOT verified"
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
        *([f"  sandbox: {doc['sandbox']}"] if doc.get("sandbox") else []),
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
    # Each fact apart, with what it holds as of (`ledger.verify.facts`).
    for fact in doc.get("established", []):
        lines.append(f"  established: {fact}")
    for fact in doc.get("not_established", []):
        lines.append(f"  NOT established: {fact}")
    for step in doc.get("steps", []):
        lines.append(f"  checked: {step}")
    return inert("".join(line + "\n" for line in lines))


def _who(signer: dict[str, Any]) -> str:
    return f"{signer.get('name') or '?'} ({str(signer['keyid'])[:12]})"
