"""What each page shows, gathered from the store (no HTML here)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from ledger.evidence.errors import Error, InputError
from ledger.identity.repoid import canonical_repo
from ledger.read import humanize
from ledger.read.findings import findings
from ledger.read.query import query_history, query_status, show_document
from ledger.read.subject import identity_from_log
from ledger.service.web import charts
from ledger.store.store import RECEIPT, Store

__all__ = ["index", "memory_page", "pr_page", "receipt_page", "trend_page"]


def _verdict_of(
    store: Store,
    repo: str,
    pr: int | None,
    rev: str | None,
    mirrors: Sequence[Path],
    scope: dict[str, str | int] | None = None,
) -> tuple[Any, dict[str, Any]]:
    ident = identity_from_log(store, repo, pr, rev, mirrors)
    return ident, query_status(store, ident, claims=None, scope=scope or {}).to_json()


def _scope(asked: Sequence[str]) -> dict[str, str | int]:
    """`scope=k=v` query parameters (repeatable), as `status --scope` takes them."""
    out: dict[str, str | int] = {}
    for item in asked:
        k, sep, v = item.partition("=")
        if not sep or not k.strip() or not v.strip():
            raise InputError(f"scope {item!r}: expected key=value")
        if k.strip() in out:
            raise InputError(f"scope {k.strip()} given twice")
        out[k.strip()] = v.strip()
    return out


def index(store: Store, mirrors: Sequence[Path] = ()) -> list[dict[str, Any]]:
    """Repositories, their PRs (each with its verdict, head, last time and counts)
    and revisions."""
    q = select(
        RECEIPT.c.repo, RECEIPT.c.pr, RECEIPT.c.commit, func.count(), func.max(RECEIPT.c.seq)
    ).group_by(RECEIPT.c.repo, RECEIPT.c.pr, RECEIPT.c.commit)
    from ledger.identity.aliases import current_id

    repos: dict[str, dict[str, Any]] = {}
    with store.engine.connect() as conn:
        rows = conn.execute(q).all()
    names: dict[str, str] = {}
    for repo, pr, commit, n, last in rows:
        if repo not in names:
            try:
                # Filed under the id `ledger repo alias` made current, as status asks it.
                names[repo] = current_id(store, canonical_repo(repo))
            except Error:
                names[repo] = repo
        name = names[repo]
        r = repos.setdefault(name, {"repo": name, "prs": {}, "revisions": {}, "receipts": 0})
        r["receipts"] += n
        if pr is not None:
            p = r["prs"].setdefault(pr, {"pr": pr, "receipts": 0, "heads": set(), "last": 0})
            p["receipts"] += n
            p["heads"].add(commit)
            p["last"] = max(p["last"], last)
        else:
            rv = r["revisions"].setdefault(commit, {"commit": commit, "receipts": 0, "last": 0})
            rv["receipts"] += n
            rv["last"] = max(rv["last"], last)
    out = []
    for r in sorted(repos.values(), key=lambda r: r["repo"]):
        prs = sorted(r["prs"].values(), key=lambda p: -p["last"])
        revisions = sorted(r["revisions"].values(), key=lambda p: -p["last"])
        out.append(
            {
                "repo": r["repo"],
                "receipts": r["receipts"],
                "prs": [
                    {
                        **p,
                        "heads": len(p["heads"]),
                        **_summary(store, r["repo"], p["pr"], None, mirrors),
                    }
                    for p in prs[:_INDEX_VERDICTS]
                ],
                "revisions": [
                    {**v, **_summary(store, r["repo"], None, v["commit"], mirrors)}
                    for v in revisions[:_INDEX_VERDICTS]
                ],
            }
        )
    return out


_INDEX_VERDICTS = 50
"""PRs (and revisions) per repository the index judges; the newest first."""


def _summary(
    store: Store, repo: str, pr: int | None, rev: str | None, mirrors: Sequence[Path]
) -> dict[str, Any]:
    """What the index shows of one PR or revision: its verdict, head and time."""
    try:
        _, report = _verdict_of(store, repo, pr, rev, mirrors)
    except Error as e:
        return {"verdict": None, "error": e.reason()}
    v = report["verdict"]
    times = [r["recorded"] for c in v["claims"] for r in c["receipts"] if r.get("recorded")]
    return {
        "verdict": v,
        "head": report["subject"]["commit"],
        "recorded": max(times) if times else None,
    }


def _scope_text(scope: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(scope.items())) or "any environment"


def pr_page(
    store: Store,
    repo: str,
    pr_text: str | None,
    rev: str | None,
    mirrors: Sequence[Path] = (),
    scope: Sequence[str] = (),
) -> dict[str, Any]:
    """The PR (or revision) page: the verdict as every surface renders it, the
    head history with times, and the reviews."""
    if not repo:
        raise InputError("repo: required")
    pr = None
    if pr_text is not None:
        if not pr_text.isdigit() or not 0 < int(pr_text) < 2**31:
            raise InputError("pr: expected a pull request number")
        pr = int(pr_text)
    ident, report = _verdict_of(store, repo, pr, rev, mirrors, _scope(scope))
    verdict = report["verdict"]
    items = [i.to_json() for i in query_history(store, ident)]
    keys = store.keys()
    heads: list[dict[str, Any]] = []
    by_head: dict[str, dict[str, Any]] = {}
    for it in items:
        if it["kind"] != "receipt":
            continue
        commit = (it.get("source") or {}).get("commit") or "?"
        h = by_head.get(commit)
        if h is None:
            h = {
                "commit": commit,
                "first_seq": it["seq"],
                "receipts": [],
                "first": None,
                "last": None,
            }
            by_head[commit] = h
            heads.append(h)
        h["receipts"].append(it)
        when = it.get("recorded")
        if when:
            h["first"] = min(h["first"] or when, when)
            h["last"] = max(h["last"] or when, when)
    current = ident.revision.commit
    known: set[str] = set()
    for h in heads:
        e = store.entry(h["receipts"][0]["id"])
        parents = e.receipt.predicate.source.parents if e is not None else []
        h["force_push"] = bool(known) and not (set(parents) & known)
        h["current"] = h["commit"] == current
        known.add(h["commit"])
    meanings = {r["id"]: r for c in verdict["claims"] for r in c["receipts"]}
    for h in heads:
        for it in h["receipts"]:
            it["meaning"] = meanings.get(it["id"])
    claim_of = {it["id"]: it.get("claim") for it in items if it["kind"] == "receipt"}
    reviews = []
    for it in items:
        if it["kind"] != "review":
            continue
        info = keys.get(it["signer"])
        e = store.entry(it["id"])
        try:
            reviewed = str(e.review.predicate.reviewed) if e is not None else None
        except Error:
            reviewed = None
        reviews.append(
            {
                **it,
                "reviewer": info.name if info else None,
                "claim": claim_of.get(it.get("receipt", "")),
                "reviewed": reviewed,
            }
        )
    # What the verdict says of each receipt a later one names as replaced: the
    # page never calls a supersession done that the verdict says had no effect.
    supersessions = [
        {**i, "meaning": meanings.get(i["id"])}
        for i in items
        if i["kind"] == "receipt" and (i["superseded"] or i.get("supersession_pending"))
    ]
    return {
        "repo": ident.revision.repo,
        "pr": pr,
        "report": report,
        "verdict": verdict,
        "trends": _trends(store, ident.revision.repo, pr, verdict, mirrors) if pr else [],
        "heads": heads,
        "items": items,
        "reviews": reviews,
        "supersessions": supersessions,
    }


def _trends(
    store: Store, repo: str, pr: int, verdict: dict[str, Any], mirrors: Sequence[Path] = ()
) -> list[dict[str, Any]]:
    """Per claim, its figure across the PR's heads (`ledger trend`): a small chart
    where two heads have one, each head's change against the base at its scope, and
    a link to the claim's trend page."""
    from ledger.trend import trend

    base, _ = _base_commits(store, repo, pr, mirrors)
    out = []
    for c in verdict["claims"]:
        t = trend(store, repo, c["claim"], pr=pr, base_commits=base)
        points = [p for p in t.points if p.figure is not None and p.where != "base"]
        if len(points) < 2 or t.name is None:
            continue
        unit = points[0].figure.unit if points[0].figure else "ratio"
        out.append(
            {
                "claim": c["claim"],
                "figure": t.name,
                "url": _trend_url(repo, pr, c["claim"]),
                "changes": [(p.where, _change_text(t, p)) for p in points],
                "no_base": t.no_base,
                "chart": charts.bars(
                    f"{c['claim']}: {t.name} per head",
                    [f"{i} {p.commit[:7]}" for i, p in enumerate(points, 1)],
                    {t.name: [p.figure.value if p.figure else None for p in points]},
                    x_label="PR head, in the order recorded",
                    y_label="bytes" if unit == "bytes" else "ratio",
                ),
            }
        )
    return out


_BASE_COMMITS = 10
"""Base branch commits a trend page looks at, newest first (`ledger trend --last`)."""


def _trend_url(repo: str, pr: int, claim: str) -> str:
    from urllib.parse import urlencode

    return "/trend?" + urlencode({"repo": repo, "pr": pr, "claim": claim})


def _base_commits(
    store: Store, repo: str, pr: int, mirrors: Sequence[Path]
) -> tuple[list[str], str]:
    """The base commits a PR's trend compares with, newest first, and where they came
    from: the base branch's last commits in the server's checkout of the repository
    where it has one, then the merge-bases the PR's receipts record (`source.base`)."""
    from ledger.identity import source
    from ledger.read.query import repo_ids

    ids = repo_ids(store, repo)
    commits: list[str] = []
    said = []
    checkout = None
    for path in mirrors:  # the server's checkout of the repository (`serve --repo`)
        try:
            r = source.open_repo(path)
            if source.repo_name(r) not in ids:
                continue
        except Error:
            continue
        checkout = r
        break
    if checkout is not None:
        try:
            tip = source.base_commit(checkout, None, offline=True)
            walk = checkout.iter_commits(tip, first_parent=True, max_count=_BASE_COMMITS)
            commits = [c.hexsha for c in walk]
            said.append(f"the base branch's last {len(commits)} commits in the server's checkout")
        except Exception:  # a checkout without the base branch: the recorded bases remain
            commits = []
    recorded = [
        b
        for i in ids
        for e in sorted(store.receipt_entries(i, pr=pr), key=lambda e: -e.seq)
        if isinstance(b := e.payload_document["predicate"]["source"].get("base"), str)
    ]
    more = [b for b in dict.fromkeys(recorded) if b not in commits]
    if more:
        said.append(f"{len(more)} merge-base{'s' if len(more) > 1 else ''} its receipts record")
    return commits + more, " and ".join(said) or "no base commit known to the server"


def _change_text(t: Any, p: Any) -> str:
    c = t.change(p)
    if c is None:
        return "records no figure"
    return str(c.text)


def trend_page(
    store: Store, repo: str, pr_text: str | None, claim: str, mirrors: Sequence[Path] = ()
) -> dict[str, Any]:
    """A claim's trend on a PR: its figure on the base commits and each head, a plot
    drawn here, and a table with each head's change in % against the newest base
    receipt at its scope (`ledger trend`)."""
    from urllib.parse import urlencode

    from ledger.trend import trend
    from ledger.trend.series import compared_scope, scope_text

    if not repo:
        raise InputError("repo: required")
    if not claim:
        raise InputError("claim: required")
    if pr_text is None or not pr_text.isdigit() or not 0 < int(pr_text) < 2**31:
        raise InputError("pr: expected a pull request number")
    pr = int(pr_text)
    ident = identity_from_log(store, repo, pr, None, mirrors)
    name = ident.revision.repo
    base, from_where = _base_commits(store, name, pr, mirrors)
    t = trend(store, name, claim, pr=pr, base_commits=base)
    rows = []
    columns: list[tuple[str, str]] = []
    plotted: list[tuple[int, float, str, str, int]] = []
    lines: dict[str, int] = {}
    scopes = {scope_text(compared_scope(q.scope)) for p in t.points for q in (p, *p.superseded)}
    for p in t.points:
        # One column per revision: its points at several scopes share it.
        column = (p.where.removeprefix(f"PR #{pr} "), p.commit[:7])
        if not columns or columns[-1] != column:
            columns.append(column)
        col = len(columns) - 1
        for q in (p, *p.superseded):
            scope = scope_text(compared_scope(q.scope))
            line = lines.setdefault(scope, len(lines))
            kind = "base" if q.where == "base" else "superseded" if q.superseded_by else "head"
            if q.figure is not None:
                plotted.append((col, q.figure.value, kind, q.figure.text, line))
            change = t.change(q) if q.where != "base" else None
            if q.where != "base" and q.figure is None:
                change_reason: str | None = "this receipt records no figure"
            else:
                change_reason = None if change is None else change.reason
            least = t.change(q, least=True) if q.where != "base" else None
            rows.append(
                {
                    "where": p.where,
                    "kind": kind,
                    "commit": q.commit,
                    "receipt": q.receipt,
                    "outcome": q.outcome,
                    "recorded": q.recorded,
                    "figure": q.figure.to_json() if q.figure else None,
                    "scope": scope,
                    "superseded_by": q.superseded_by,
                    "change": None if change is None else change.to_json(),
                    "change_text": change_reason,
                    "least": q.least.to_json() if q.least else None,
                    "least_text": None if least is None else least.least_text,
                }
            )
    in_bytes = any(p.figure and p.figure.unit == "bytes" for p in t.points)
    chart = (
        charts.trend(
            f"{claim}: {t.name} per revision",
            columns,
            plotted,
            in_bytes=in_bytes,
            y_label=f"{t.name} ({'bytes' if in_bytes else 'ratio'})",
        )
        if plotted and t.name
        else None
    )
    doc = {"repo": name, "pr": pr, "base_from": from_where, **t.to_json()}
    return {
        "repo": name,
        "pr": pr,
        "claim": claim,
        "figure": t.name,
        "trend": doc,
        "rows": rows,
        "chart": chart,
        "no_base": t.no_base,
        "base_from": from_where,
        "one_scope": next(iter(scopes)) if len(scopes) == 1 else None,
        "pr_url": "/pr?" + urlencode({"repo": name, "pr": pr}),
    }


def _charts(measurements: dict[str, Any]) -> list[str]:
    """Predicted vs measured bytes per shape, one chart per phase; refusals and
    counterexamples marked."""
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

        marks = []
        for r in rs:
            if r.get("counterexample"):
                marks.append("counterexample")
            elif r.get("admitted") is False or r.get("status") == "refused":
                marks.append("refused")
            else:
                marks.append("")
        out.append(
            charts.bars(
                f"{phase}: predicted vs measured bytes per shape",
                [str(r["shape"]) for r in rs],
                {
                    "predicted": [num(r.get("predicted_bytes")) for r in rs],
                    "measured": [num(r.get("measured_bytes")) for r in rs],
                },
                marks=marks,
                x_label="shape (batch x sequence)",
                y_label="bytes",
            )
        )
    return out


# Scalars a reviewer reads first, per check: the verdict figures.
_KEY_SCALARS: dict[str, tuple[str, ...]] = {
    "admission": (
        "counterexample_count",
        "admitted_count",
        "refused_count",
        "over_refused_count",
        "max_measured_over_predicted",
        "min_measured_over_predicted",
        "attempts",
    ),
    "gradient-compare": (
        "rule",
        "tensors_beyond_rule",
        "tensors_inconclusive",
        "threshold",
        "tensors_over_threshold",
        "tensors_compared",
        "max_rel_l2",
        "max_noise_rel_l2",
        "noise_margin",
        "min_cosine",
        "arms_in_parallel",
    ),
}


def _cell(key: str, v: Any) -> dict[str, Any]:
    """One value for a page: the readable text and, where it differs, the exact one."""
    if isinstance(v, list) and not any(isinstance(x, dict | list) for x in v):
        return {"text": ", ".join(humanize.value(key, x) for x in v) or "(none)", "exact": None}
    text = humanize.value(key, v)
    exact = str(v) if isinstance(v, int | float) and not isinstance(v, bool) else None
    if isinstance(v, str) and humanize.is_digest(v):
        exact = v
    if exact == text:
        exact = None
    return {"text": text, "exact": exact}


def _flat(prefix: str, v: Any) -> list[tuple[str, Any]]:
    if isinstance(v, dict):
        out: list[tuple[str, Any]] = []
        for k, x in v.items():
            out += _flat(f"{prefix}.{k}" if prefix else str(k), x)
        return out
    return [(prefix, v)]


_SHOWN_ROWS = 10
"""Rows of a long table shown before the rest collapse under a count."""


def _table(name: str, rows: list[dict[str, Any]], cols: list[str]) -> dict[str, Any]:
    """A table of records with `cols`: its first rows, and the rest apart (collapsed)."""
    out = [
        {
            "cells": [_cell(c, r.get(c)) for c in cols],
            "counterexample": bool(r.get("counterexample")) or bool(r.get("over_threshold")),
            "refused": r.get("admitted") is False,
        }
        for r in rows
    ]
    return {
        "name": name,
        "cols": cols,
        "rows": out[:_SHOWN_ROWS],
        "more": out[_SHOWN_ROWS:],
        "count": len(out),
        "key": name in humanize.KEY_COLUMNS,
    }


def _measurements(check: str, m: dict[str, Any]) -> dict[str, Any]:
    """Every measurement: key figures first, scalars (nested dicts flattened), lists
    of scalars joined; lists of records as tables, each once with its judging
    columns (the finding) and once whole (every column, collapsed)."""
    key = [k for k in _KEY_SCALARS.get(check, ()) if k in m]
    scalars: list[tuple[str, dict[str, Any]]] = []
    tables: list[dict[str, Any]] = []
    judging: list[dict[str, Any]] = []
    for k, v in m.items():
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            rows = humanize.sorted_rows(k, v)
            cols = humanize.columns(k, rows)
            tables.append(_table(k, rows, cols))
            if k in humanize.KEY_COLUMNS:
                judging.append(_table(k, rows, cols[: humanize.JUDGING]))
        elif isinstance(v, list):
            scalars.append(
                (k, {"text": ", ".join(humanize.value(k, x) for x in v) or "(none)", "exact": None})
            )
        else:
            scalars += [(fk, _cell(fk, fv)) for fk, fv in _flat(k, v)]
    first = [(k, c) for k, c in scalars if k in key]
    first.sort(key=lambda kc: key.index(kc[0]))
    rest = [(k, c) for k, c in scalars if k not in key]
    tables.sort(key=lambda t: not t["key"])
    worst = next((t for t in judging if t["name"] == "tensors"), None)
    return {
        "key": first,
        "scalars": rest,
        "tables": tables,
        "judging": [t for t in judging if t is not worst],
        "worst": worst,
        "ratio": _worst_ratio(m),
    }


def _worst_ratio(m: dict[str, Any]) -> dict[str, Any] | None:
    """Admission's deciding measured/predicted: the ratio, where, and both figures.

    The worst counterexample's where there is one, else the worst admitted
    shape's: a refused shape decides nothing (its ratio says only that it would
    have fit), and the check's `max_measured_over_predicted` is over admitted
    shapes, so the headline and the table beneath it say the same figure."""
    rows = [
        r
        for r in m.get("shapes") or []
        if isinstance(r, dict)
        and isinstance(r.get("measured_over_predicted"), int | float)
        and not isinstance(r.get("measured_over_predicted"), bool)
        and r.get("admitted") is not False
    ]
    rows = [r for r in rows if r.get("counterexample") is True] or rows
    if not rows:
        return None
    r = max(rows, key=lambda r: float(r["measured_over_predicted"]))
    return {
        "ratio": humanize.number(float(r["measured_over_predicted"])),
        "shape": r.get("shape"),
        "phase": r.get("phase"),
        "predicted": _cell("predicted_bytes", r.get("predicted_bytes")),
        "measured": _cell("measured_bytes", r.get("measured_bytes")),
        "over": float(r["measured_over_predicted"]) > 1,
    }


def receipt_page(store: Store, ref: str, led: Any) -> dict[str, Any]:
    """A receipt (or review): what it means for its PR, what ran, where, every
    measurement, and how to check it offline."""
    from ledger.transparency.logged import verify_in_ledger

    doc = show_document(store, ref)
    try:
        verification: dict[str, Any] = verify_in_ledger(store, doc["id"]).to_json()
    except Error as e:
        from ledger.service.api import public_reason

        # Shown to any client: without the server's paths, as every error is.
        verification = {"verified": False, "reason": public_reason(led, e.reason())}
    p = doc["statement"].get("predicate", {})
    keys = store.keys()
    for r in doc.get("reviews", []):
        info = keys.get(r.get("signer", ""))
        r["reviewer"] = info.name if info else None
    ctx: dict[str, Any] = {
        "doc": doc,
        "p": p,
        "verification": verification,
        "snapshot_type": "application/vnd.pytorch.memory-snapshot+pickle",
        "meaning": None,
        "question": None,
        "superseded_by": [],
    }
    if doc["kind"] == "review":
        try:
            target = show_document(store, p["receipt"])
            ctx["reviewed"] = target["statement"]["predicate"]
        except Error:
            ctx["reviewed"] = None
        return ctx
    src = p.get("source", {})
    # What this receipt means for its PR (the PR's current head), or its commit.
    try:
        pr = src.get("pr")
        ident, report = _verdict_of(
            store,
            src.get("repo", ""),
            pr,
            None if pr is not None else src.get("commit"),
            led.mirrors,
        )
        v = report["verdict"]
        meaning = None
        for c in v["claims"]:
            for r in c["receipts"]:
                if r["id"] == doc["id"]:
                    meaning = {**r, "claim_state": c["state"], "scope_text": c["scope_text"]}
        ctx["meaning"] = meaning
        ctx["question"] = {
            "repo": ident.revision.repo,
            "pr": pr,
            "rev": None if pr is not None else ident.revision.commit,
            "head": ident.revision.commit,
            "headline": v["headline"],
        }
        for it in query_history(store, ident):
            if it.id == doc["id"]:
                ctx["superseded_by"] = [s.to_json() for s in it.superseded_by]
    except Error:
        pass
    ctx["params"] = [
        (k, _cell(k, v)) for k, v in _flat("", p.get("check", {}).get("parameters") or {})
    ]
    ctx["environment"] = [(k, _cell(k, v)) for k, v in (p.get("scope") or {}).items()]
    runner_env = (p.get("runner") or {}).get("environment") or {}
    ctx["runner_environment"] = [(k, _cell(k, v)) for k, v in runner_env.items()]
    ctx["m"] = _measurements(p.get("check", {}).get("name", ""), p.get("measurements") or {})
    # The deciding figures first, in the words `ledger show` prints.
    ctx["found"] = findings(p)
    ctx["charts"] = _charts(p.get("measurements") or {})
    ctx["digests"] = [
        ("commit", src.get("commit")),
        ("tree", src.get("tree")),
        ("package", (src.get("package") or {}).get("digest")),
    ]
    return ctx


def memory_page(led: Any, digest_ref: str) -> dict[str, Any]:
    from ledger.service.web.snapshot import timeline_of
    from ledger.write.artifacts import _digest

    try:
        digest = _digest(digest_ref)
    except Error as e:
        raise InputError(e.reason()) from None
    media, data = led.artifact(digest)
    # In a worker process with CPU, memory and time limits, once per digest.
    tl = timeline_of(digest, data)
    chart = charts.lines(
        "memory over time (device 0)",
        {"allocated": tl.allocated, "reserved": tl.reserved},
        (tl.peak[0], tl.peak[1], f"peak {charts.human_bytes(tl.peak[1])}"),
    )
    return {"digest": digest, "media": media, "tl": tl, "chart": chart}
