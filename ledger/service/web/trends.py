"""The reviewer's trend views: per claim on the PR page, its figure across the PR's
heads (a small chart, each head's change, a link), and the claim's trend page (`/trend`):
its figure on the base branch's recent commits and each head, plotted, with a table of
each head's change against the newest base receipt at its scope (`ledger trend`).
The subject and the merge-bases its receipts record are read through the server's
reader; the series itself is `ledger trend`'s, read from the receipts alone."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.evidence.errors import Error, InputError
from ledger.identity.revision import Revision
from ledger.read.question import Question
from ledger.read.reader import LocalReader
from ledger.service.web import charts

if TYPE_CHECKING:
    from ledger.trend.series import Trend

__all__ = ["pr_trends", "trend_page", "trend_url"]


def pr_trends(
    reader: LocalReader,
    repo: str,
    pr: int,
    verdict: dict[str, Any],
    mirrors: Sequence[Path] = (),
) -> list[dict[str, Any]]:
    """Per claim, its figure across the PR's heads (`ledger trend`): a small chart
    where two heads have one, each head's change against the base at its scope, and
    a link to the claim's trend page."""
    from ledger.trend import trend

    base, _ = _base_commits(reader, repo, pr, mirrors)
    out = []
    for c in verdict["claims"]:
        t = trend(reader.store, repo, c["claim"], pr=pr, base_commits=base, void=reader.void)
        points = [p for p in t.points if p.figure is not None and p.where != "base"]
        if len(points) < 2 or t.name is None:
            continue
        unit = points[0].figure.unit if points[0].figure else "ratio"
        out.append(
            {
                "claim": c["claim"],
                "figure": t.name,
                "url": trend_url(repo, pr, c["claim"]),
                "changes": [(p.where, _change_text(t, p)) for p in points],
                # Not drawn: said beneath the chart, with why.
                "void": [(v.where, v.receipt, v.why) for v in t.void if v.where != "base"],
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


def trend_url(repo: str, pr: int, claim: str, figure: str | None = None) -> str:
    """A claim's trend page; with ``figure``, the series of that figure (a blocker's
    deciding one, `ledger.qualification.deciding`), its bound drawn."""
    from urllib.parse import urlencode

    q: dict[str, Any] = {"repo": repo, "pr": pr, "claim": claim}
    if figure is not None:
        q["figure"] = figure
    return "/trend?" + urlencode(q)


def _base_commits(
    reader: LocalReader, repo: str, pr: int, mirrors: Sequence[Path]
) -> tuple[list[str], str]:
    """The base commits a PR's trend compares with, newest first, and where they came
    from: the base branch's last commits in the server's checkout of the repository
    where it has one, then the merge-bases the PR's receipts record (`source.base`)."""
    from ledger.identity import source
    from ledger.read.evidence import repo_ids

    ids = repo_ids(reader.store, repo)
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
    # The PR's receipts under the repository's id and every id aliased to it, newest first.
    held = reader.evidence(Question(Revision(repo=repo, commit="", tree="", pr=pr))).receipts
    recorded = [
        b
        for r in sorted(held, key=lambda r: -r.seq)
        if isinstance(b := r.predicate.source.base, str)
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
    reader: LocalReader,
    repo: str,
    pr_text: str | None,
    claim: str,
    mirrors: Sequence[Path] = (),
    figure: str | None = None,
) -> dict[str, Any]:
    """A claim's trend on a PR: its figure on the base commits and each head, a plot
    drawn here, and a table with each head's change in % against the newest base
    receipt at its scope (`ledger trend`)."""
    from urllib.parse import urlencode

    from ledger.trend import trend

    if not repo:
        raise InputError("repo: required")
    if not claim:
        raise InputError("claim: required")
    if pr_text is None or not pr_text.isdigit() or not 0 < int(pr_text) < 2**31:
        raise InputError("pr: expected a pull request number")
    pr = int(pr_text)
    from ledger.qualification.deciding import KEYS

    if figure is not None and figure not in KEYS:
        raise InputError(f"figure: expected one of {', '.join(KEYS)}")
    ident = reader.subject(repo, pr, None, mirrors)
    name = ident.revision.repo
    base, from_where = _base_commits(reader, name, pr, mirrors)
    t = trend(reader.store, name, claim, pr=pr, base_commits=base, figure=figure, void=reader.void)
    rows, columns, plotted, scopes = _rows(t, pr)
    in_bytes = any(p.figure and p.figure.unit == "bytes" for p in t.points)
    unit = "bytes" if in_bytes else "ratio" if figure != "repeat-difference" else "difference"
    chart = (
        charts.trend(
            f"{claim}: {t.name} per revision",
            columns,
            plotted,
            in_bytes=in_bytes,
            y_label=f"{t.name} ({unit})",
            bound=t.bound,
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
        "figure_key": figure,
        "bound": t.bound,
        "bound_text": _bound_text(t),
        "trend": doc,
        "rows": rows,
        "chart": chart,
        "no_base": t.no_base,
        "base_from": from_where,
        "one_scope": next(iter(scopes)) if len(scopes) == 1 else None,
        "pr_url": "/pr?" + urlencode({"repo": name, "pr": pr}),
    }


def _bound_text(t: Trend) -> str | None:
    """The bound of the figure the trend follows, as its points say it (`1x`, `0.25x`)."""
    from ledger.qualification.figures import Figure

    if t.bound is None or t.name is None:
        return None
    units = [p.figure.unit for p in t.points if p.figure is not None]
    return Figure(t.name, t.bound, units[0] if units else "ratio").text


def _rows(
    t: Trend, pr: int
) -> tuple[
    list[dict[str, Any]], list[tuple[str, str]], list[tuple[int, float, str, str, int]], set[str]
]:
    """The trend's table, a row per receipt (a head's superseded ones beside it), each
    head's change against the base at its scope; the chart's columns (one per revision)
    and points (one line per scope); the scopes compared."""
    from ledger.trend.series import compared_scope, scope_text

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
    return rows, columns, plotted, scopes
