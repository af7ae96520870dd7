"""What each page shows (no HTML here), read through the server's reader
(`Ledger.reader`, the read side's `LocalReader` over the one store): the status,
history and entry documents the JSON routes answer, so a page and its route never
differ. Each verdict the index shows, and the PR page's where no scope is asked, is
the answer `GET /v1/status` keeps (`service/answers.py`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ledger.evidence.errors import Error, InputError
from ledger.identity.repoid import canonical_repo
from ledger.plans.governing import Identity
from ledger.read.findings import findings
from ledger.read.question import Question
from ledger.read.reader import LocalReader
from ledger.read.subject import judged_from_log, with_plan_source
from ledger.read.whose import BASELINE_FOR
from ledger.service.answers import Answers
from ledger.service.questions import answer
from ledger.service.web import charts
from ledger.service.web.measurements import cell as _cell
from ledger.service.web.measurements import flat as _flat
from ledger.service.web.measurements import measurement_charts as _charts
from ledger.service.web.measurements import measurement_tables as _measurements
from ledger.service.web.trends import pr_trends, trend_page, trend_url

__all__ = ["index", "memory_page", "pr_page", "receipt_page", "trend_page"]


def _verdict_of(
    reader: LocalReader,
    repo: str,
    pr: int | None,
    rev: str | None,
    mirrors: Sequence[Path],
    scope: dict[str, str | int] | None = None,
    answers: Answers | None = None,
) -> tuple[Identity, dict[str, Any]]:
    """The subject as the server resolves it, and its status answer: the one
    `GET /v1/status?repo=R&pr=N` (or `&rev=C`) gives, kept where that route keeps it;
    with a scope, the reader's answer at that scope (the route takes none)."""
    ident, source = judged_from_log(reader.store, repo, pr, rev, mirrors)
    if scope:
        return ident, with_plan_source(reader.status(ident, (), scope), source)
    asked = {"repo": repo, **({"pr": str(pr)} if pr is not None else {"rev": str(rev)})}
    # A copy: the page adds its notes to what the kept answer judged.
    return ident, dict(answer("status", "query", reader.store, asked, mirrors, answers))


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


def index(
    reader: LocalReader, mirrors: Sequence[Path] = (), answers: Answers | None = None
) -> list[dict[str, Any]]:
    """Repositories, their PRs (each with its verdict, head, last time and counts)
    and revisions. Each verdict is the status answer `GET /v1/status` gives, kept in
    ``answers`` (the server's answers, `ledger.service.answers`) while the log is
    unchanged: a page loaded again judges nothing."""
    from ledger.identity.aliases import current_id

    store = reader.store
    repos: dict[str, dict[str, Any]] = {}
    rows = store.receipt_groups()
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
            rv = r["revisions"].setdefault(
                commit, {"commit": commit, "receipts": 0, "last": 0, "ids": set()}
            )
            rv["receipts"] += n
            rv["last"] = max(rv["last"], last)
            rv["ids"].add(repo)
    for r in repos.values():
        _file_baselines(reader, r)
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
                        **_summary(reader, r["repo"], p["pr"], None, mirrors, answers),
                    }
                    for p in prs[:_INDEX_VERDICTS]
                ],
                "revisions": [
                    {
                        **{k: x for k, x in v.items() if k != "ids"},
                        **_summary(reader, r["repo"], None, v["commit"], mirrors, answers),
                    }
                    for v in revisions[:_INDEX_VERDICTS]
                ],
            }
        )
    return out


_BASELINE_OF_PR = re.compile(r" of PR #(\d+)\Z")


def _file_baselines(reader: LocalReader, r: dict[str, Any]) -> None:
    """A base commit whose every receipt is a baseline run (`execution/baseline.py`: its
    environment names the head and PR it judged the base for) is filed under that PR,
    not listed as a revision of its own: nobody asked about the base for its own sake."""
    for commit, rv in list(r["revisions"].items()):
        asked: set[int] = set()
        for repo_id in rv["ids"]:
            ev = reader.evidence(Question.about(repo_id, commit))
            if ev.unreadable:
                asked.add(0)  # unreadable: it stays where it is, as a revision
            for e in ev.receipts:
                p = e.predicate
                if p.source.commit != commit:
                    continue
                m = _BASELINE_OF_PR.search(p.runner.environment.get(BASELINE_FOR) or "")
                asked.add(int(m.group(1)) if m else 0)
        if len(asked) != 1 or (pr := asked.pop()) not in r["prs"]:
            continue
        r["prs"][pr].setdefault("baselines", []).append(
            {"commit": commit, "receipts": rv["receipts"]}
        )
        del r["revisions"][commit]


_INDEX_VERDICTS = 50
"""PRs (and revisions) per repository the index judges; the newest first."""


def _summary(
    reader: LocalReader,
    repo: str,
    pr: int | None,
    rev: str | None,
    mirrors: Sequence[Path],
    answers: Answers | None,
) -> dict[str, Any]:
    """What the index shows of one PR or revision: its verdict, head and time, from
    the status answer to ``GET /v1/status?repo=R&pr=N`` (or ``&rev=C``), kept where
    that route keeps it."""
    asked = {"repo": repo, **({"pr": str(pr)} if pr is not None else {"rev": str(rev)})}
    try:
        report = answer("status", "query", reader.store, asked, mirrors, answers)
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
    reader: LocalReader,
    repo: str,
    pr_text: str | None,
    rev: str | None,
    mirrors: Sequence[Path] = (),
    scope: Sequence[str] = (),
    answers: Answers | None = None,
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
    ident, report = _verdict_of(reader, repo, pr, rev, mirrors, _scope(scope), answers)
    verdict = report["verdict"]
    items: list[dict[str, Any]] = reader.history(ident)["entries"]
    meanings = {r["id"]: r for c in verdict["claims"] for r in c["receipts"]}
    heads = _heads(reader, ident, items, meanings)
    reviews = _reviews(reader, items)
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
        "deciding": _deciding(ident.revision.repo, pr, verdict) if pr else {},
        "trends": pr_trends(reader, ident.revision.repo, pr, verdict, mirrors) if pr else [],
        "heads": heads,
        "items": items,
        "reviews": reviews,
        "supersessions": supersessions,
    }


def _deciding(repo: str, pr: int, verdict: dict[str, Any]) -> dict[str, Any]:
    """Per blocker, the figure the judge says decides it (`ClaimVerdict.deciding`) and
    the trend page of that figure's series, where its link leads."""
    out: dict[str, Any] = {}
    for b in verdict["blockers"]:
        d = b.get("deciding")
        if isinstance(d, dict):
            out[b["claim"]] = {**d, "url": trend_url(repo, pr, b["claim"], str(d["key"]))}
    return out


def _heads(
    reader: LocalReader,
    ident: Identity,
    items: list[dict[str, Any]],
    meanings: dict[str, Any],
) -> list[dict[str, Any]]:
    """The PR's heads in the order recorded: each its receipts (with what the verdict
    says each means), first and last time, whether it is current and whether it came
    by force push (no parent among the heads before it). The parents are read from the
    question's evidence through the reader, as the history was (one read for all)."""
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
    parents_of = {
        r.id: list(r.predicate.source.parents) for r in reader.evidence(Question.of(ident)).receipts
    }
    known: set[str] = set()
    for h in heads:
        # A receipt whose body does not read has no parents here (it is a problem of
        # the history's answer).
        parents = parents_of.get(h["receipts"][0]["id"], [])
        h["force_push"] = bool(known) and not (set(parents) & known)
        h["current"] = h["commit"] == ident.revision.commit
        known.add(h["commit"])
    for h in heads:
        for it in h["receipts"]:
            it["meaning"] = meanings.get(it["id"])
    return heads


def _review_of(reader: LocalReader, ref: str) -> tuple[str | None, str | None]:
    """A review's reviewer (the name of its entry's signer) and when it says it
    reviewed, as `GET /v1/entries/ID` shows the review; (None, None) where it does
    not read."""
    try:
        doc = reader.show(ref)
        reviewed = doc["statement"]["predicate"].get("reviewed")
        return doc["signer"]["name"], None if reviewed is None else str(reviewed)
    except Error:
        return None, None


def _reviews(reader: LocalReader, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The reviews of the PR's receipts: each with its reviewer's name, the claim of
    the receipt it reviews and what it says was reviewed."""
    claim_of = {it["id"]: it.get("claim") for it in items if it["kind"] == "receipt"}
    reviews = []
    for it in items:
        if it["kind"] != "review":
            continue
        reviewer, reviewed = _review_of(reader, it["id"])
        reviews.append(
            {
                **it,
                "reviewer": reviewer,
                "claim": claim_of.get(it.get("receipt", "")),
                "reviewed": reviewed,
            }
        )
    return reviews


def receipt_page(reader: LocalReader, ref: str, led: Any) -> dict[str, Any]:
    """A receipt (or review): what it means for its PR, what ran, where, every
    measurement, and how to check it offline. The entry as `GET /v1/entries/ID` shows
    it (a revoked receipt's revocation, weighed), verified as `GET /v1/verify/ID`."""
    doc = reader.show(ref)
    try:
        verification: dict[str, Any] = reader.verification(doc["id"])
    except Error as e:
        from ledger.service.api import public_reason

        # Shown to any client: without the server's paths, as every error is.
        verification = {"verified": False, "reason": public_reason(led, e.reason())}
    p = doc["statement"].get("predicate", {})
    for r in doc.get("reviews", []):
        # The entry's reviews carry their statements' predicates, not who signed them:
        # the reviewer is the signer of the review's own entry.
        r["reviewer"] = _review_of(reader, r["id"])[0]
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
            target = reader.show(p["receipt"])
            ctx["reviewed"] = target["statement"]["predicate"]
        except Error:
            ctx["reviewed"] = None
        return ctx
    src = p.get("source", {})
    # What this receipt means for its PR (the PR's current head), or its commit.
    try:
        pr = src.get("pr")
        ident, report = _verdict_of(
            reader,
            src.get("repo", ""),
            pr,
            None if pr is not None else src.get("commit"),
            led.mirrors,
            answers=led.answers,
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
        for it in reader.history(ident)["entries"]:
            if it["id"] == doc["id"]:
                ctx["superseded_by"] = it["superseded_by"]
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
    # The one figure that decided it, beside what it means (`ledger.qualification.deciding`).
    from ledger.qualification.deciding import deciding_of

    decided = deciding_of(p)
    ctx["deciding"] = decided.to_json() if decided is not None else None
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
