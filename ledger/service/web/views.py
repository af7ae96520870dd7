"""What each page shows, gathered from the store (no HTML here)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from ledger.errors import Error, InputError
from ledger.query import query_history, query_status, show_document
from ledger.repoid import canonical_repo
from ledger.service.questions import identity_from_log
from ledger.service.web import charts
from ledger.store.store import RECEIPT, Store

__all__ = ["index", "memory_page", "pr_page", "receipt_page"]


def index(store: Store) -> list[dict[str, Any]]:
    """Repositories, their PRs and revisions, with receipt counts."""
    q = select(
        RECEIPT.c.repo, RECEIPT.c.pr, RECEIPT.c.commit, func.count(), func.max(RECEIPT.c.seq)
    ).group_by(RECEIPT.c.repo, RECEIPT.c.pr, RECEIPT.c.commit)
    repos: dict[str, dict[str, Any]] = {}
    with store.engine.connect() as conn:
        rows = conn.execute(q).all()
    for repo, pr, commit, n, last in rows:
        try:
            name = canonical_repo(repo)
        except Error:
            name = repo
        r = repos.setdefault(name, {"repo": name, "prs": {}, "revisions": {}, "receipts": 0})
        r["receipts"] += n
        if pr is not None:
            p = r["prs"].setdefault(pr, {"pr": pr, "receipts": 0, "heads": set(), "last": 0})
            p["receipts"] += n
            p["heads"].add(commit)
            p["last"] = max(p["last"], last)
        else:
            r["revisions"][commit] = r["revisions"].get(commit, 0) + n
    out = []
    for r in sorted(repos.values(), key=lambda r: r["repo"]):
        prs = sorted(r["prs"].values(), key=lambda p: -p["last"])
        out.append(
            {
                "repo": r["repo"],
                "receipts": r["receipts"],
                "prs": [{**p, "heads": len(p["heads"])} for p in prs],
                "revisions": sorted(r["revisions"].items()),
            }
        )
    return out


def _scope_text(scope: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(scope.items())) or "(any)"


def pr_page(
    store: Store, repo: str, pr_text: str | None, rev: str | None, mirrors: Sequence[Path] = ()
) -> dict[str, Any]:
    if not repo:
        raise InputError("repo: required")
    pr = None
    if pr_text is not None:
        if not pr_text.isdigit() or not 0 < int(pr_text) < 2**31:
            raise InputError("pr: expected a pull request number")
        pr = int(pr_text)
    ident = identity_from_log(store, repo, pr, rev, mirrors)
    report = query_status(store, ident, claims=None, scope={}).to_json()
    items = [i.to_json() for i in query_history(store, ident)]
    # The matrix: one row per claim, one column per scope any row has.
    scopes: list[str] = []
    matrix: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for row in report["claims"]:
        s = _scope_text(row["scope"])
        if s not in scopes:
            scopes.append(s)
        matrix[row["claim"]][s] = {**row, "scope_text": s}
    heads: list[dict[str, Any]] = []
    by_head: dict[str, dict[str, Any]] = {}
    for it in items:
        if it["kind"] != "receipt":
            continue
        commit = (it.get("source") or {}).get("commit") or it.get("commit") or "?"
        h = by_head.get(commit)
        if h is None:
            h = {"commit": commit, "first_seq": it["seq"], "receipts": [], "parents": []}
            by_head[commit] = h
            heads.append(h)
        h["receipts"].append(it)
    current = ident.revision.commit
    known: set[str] = set()
    for h in heads:
        e = store.entry(h["receipts"][0]["id"])
        parents = e.receipt.predicate.source.parents if e is not None else []
        h["force_push"] = bool(known) and not (set(parents) & known)
        h["current"] = h["commit"] == current
        known.add(h["commit"])
    disputes = [i for i in items if i["kind"] == "review" and i.get("verdict") == "dispute"]
    supersessions = [
        i
        for i in items
        if i["kind"] == "receipt" and (i["superseded"] or i["supersession_pending"])
    ]
    return {
        "repo": ident.revision.repo,
        "pr": pr,
        "report": report,
        "scopes": scopes,
        "matrix": dict(matrix),
        "heads": heads,
        "items": items,
        "disputes": disputes,
        "supersessions": supersessions,
    }


def _charts(measurements: dict[str, Any]) -> list[str]:
    """Predicted vs measured bytes per shape, one chart per phase."""
    rows = measurements.get("shapes")
    if not isinstance(rows, list):
        return []
    phases: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if isinstance(r, dict) and "shape" in r and r.get("run", "first") == "first":
            phases[str(r.get("phase", "step"))].append(r)
    out = []
    for phase, rs in phases.items():

        def num(v: Any) -> float | None:
            return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

        out.append(
            charts.bars(
                f"{phase}: predicted vs measured",
                [str(r["shape"]) for r in rs],
                {
                    "predicted": [num(r.get("predicted_bytes")) for r in rs],
                    "measured": [num(r.get("measured_bytes")) for r in rs],
                },
            )
        )
    return out


def receipt_page(store: Store, ref: str, led: Any) -> dict[str, Any]:
    from ledger.verify.logged import verify_in_ledger

    doc = show_document(store, ref)
    try:
        verification: dict[str, Any] = verify_in_ledger(store, doc["id"]).to_json()
    except Error as e:
        verification = {"verified": False, "reason": e.reason()}
    p = doc["statement"].get("predicate", {})
    m = p.get("measurements") or {}
    scalars = {k: v for k, v in m.items() if not isinstance(v, dict | list)}
    tables = {k: v for k, v in m.items() if isinstance(v, list) and v and isinstance(v[0], dict)}
    return {
        "doc": doc,
        "p": p,
        "verification": verification,
        "state": p.get("outcome", doc["kind"]),
        "scalars": scalars,
        "tables": {k: (sorted({c for r in v for c in r}), v) for k, v in tables.items()},
        "charts": _charts(m),
        "snapshot_type": "application/vnd.pytorch.memory-snapshot+pickle",
    }


def memory_page(led: Any, digest_ref: str) -> dict[str, Any]:
    from ledger.artifacts import _digest
    from ledger.service.web.snapshot import read_snapshot

    try:
        digest = _digest(digest_ref)
    except Error as e:
        raise InputError(e.reason()) from None
    media, data = led.artifact(digest)
    tl = read_snapshot(data)
    chart = charts.lines(
        "memory over time (device 0)",
        {"allocated": tl.allocated, "reserved": tl.reserved},
        (tl.peak[0], tl.peak[1], f"peak {charts.human_bytes(tl.peak[1])}"),
    )
    return {"digest": digest, "media": media, "tl": tl, "chart": chart}
