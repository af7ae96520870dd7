"""Status and history over HTTP: the same documents as `status --json` and
`history --json`.

Two ways to ask. The CLI (`status --server`) identifies the revision and its
plan in its own checkout, as it does locally, and posts that question: the
answer is then the one a local `status` would give. A browser or a script
without a checkout asks `GET /v1/status?repo=R&pr=N` (or `&rev=COMMIT`): the
server knows no git repository, so the subject is what the log knows of it
(for a PR, the head the newest receipt was recorded for) and the plan is the
one a writer recorded in the ledger for that head (`ledger.plans`), proved by its
git objects; without one no claim is judged ("no governing plan recorded"), never
the default rules; `judged` says which.
A server started with `--repo PATH` (a clone it fetches before a question, at most
once per `--fetch-every`: `ledger.service.fetching`) answers from that checkout
instead, exactly as `status --offline` (`ledger.read.subject`). Either way the read
side's local reader judges it, as a local `status` would; the answer names the plan
it judged by (`plan_source`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any, Literal

from ledger.evidence.errors import Error, InputError
from ledger.identity.repoid import canonical_repo
from ledger.plans.governing import Identity
from ledger.read.question import Question
from ledger.read.reader import LocalReader
from ledger.read.subject import judged_from_log, with_plan_source
from ledger.service.answers import Answers
from ledger.store.store import Store

__all__ = ["How", "Which", "answer", "kept", "with_notes"]

Which = Literal["status", "history", "evidence"]
"""Which answer: `status --json`, `history --json`, or the evidence under them (the
receipts and reviews a client judges itself: a baseline reading the base's)."""
How = Literal["question", "query"]
"""How the question arrives: a question document the CLI identified in its checkout
(`POST`), or query parameters that name a repository and a PR or commit (`GET`)."""


def _current(store: Store, q: Identity) -> Identity:
    """The question about the id its repository's receipts count under now: a checkout
    still named by an earlier id (`ledger repo alias OLD NEW`) gets the answer under NEW,
    with the receipts of both."""
    from ledger.identity.aliases import current_id

    try:
        now = current_id(store, q.revision.repo)
    except Error:
        return q  # an id that does not read: the answer says what it finds under it
    if now == q.revision.repo:
        return q
    return dataclasses.replace(q, revision=dataclasses.replace(q.revision, repo=now))


def _answer(
    store: Store, answers: Answers | None, key: Hashable, compute: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """`compute()`, or the answer kept for `key` while the log size is unchanged."""
    size = store.refresh()
    if answers is None:
        return compute()
    doc: dict[str, Any] = answers.get(key, size, compute)
    return doc


def kept(
    which: Which,
    how: How,
    store: Store,
    question: dict[str, Any],
    mirrors: Sequence[Path],
    answers: Answers | None,
) -> dict[str, Any] | None:
    """The answer kept for a question while the log size is unchanged, or None (the
    caller computes it: `answer`). Never computes and never reads git (a mirror's
    answer depends on its checkout): cheap enough for the server's event loop, so a
    repeated question skips the worker thread."""
    kind = _kind(which, how)
    if answers is None or (mirrors and how == "query"):
        return None
    try:
        if how == "query":
            repo, pr, rev = _parse(question)
            key: Hashable = (kind, canonical_repo(repo), pr, rev)
        else:
            key = (kind, _key(question))
        size = store.refresh()
    except Exception:  # bad input or a database error: the worker path says which
        return None
    doc: dict[str, Any] | None = answers.peek(key, size)
    return doc


def with_notes(doc: dict[str, Any], notes: Sequence[str]) -> dict[str, Any]:
    """The answer with notes of how it was judged (a checkout's fetch that failed) added
    to its `judged`, a copy: the kept answer stays as computed."""
    if not notes:
        return doc
    key = "judged" if "judged" in doc else "notes"
    return {**doc, key: [*doc.get(key, []), *notes]}


def _key(doc: Any) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def _parse(q: dict[str, str]) -> tuple[str, int | None, str | None]:
    repo = q.get("repo")
    if not repo:
        raise InputError("repo: required")
    pr_text = q.get("pr")
    pr = None
    if pr_text is not None:
        if not pr_text.isdigit() or not 0 < int(pr_text) < 2**31:
            raise InputError("pr: expected a pull request number")
        pr = int(pr_text)
    return repo, pr, q.get("rev")


def _kind(which: Which, how: How) -> str:
    return which if how == "question" else f"{which}-get"


def answer(
    which: Which,
    how: How,
    store: Store,
    asked: dict[str, Any],
    mirrors: Sequence[Path] = (),
    answers: Answers | None = None,
) -> dict[str, Any]:
    """The status or history document for a question, however it arrived, answered by
    the read side's local reader over the server's store (it never signs); the answer
    kept while the log size is unchanged where `answers` keeps them.

    A posted question is about the revision the CLI identified, under the id its
    repository's receipts count under now. Query parameters name a repository and a
    PR or commit: the subject is what the log (or a mirror checkout) knows of it."""
    reader = LocalReader(store=store, signs=False)
    kind = _kind(which, how)

    def judge(
        ident: Identity,
        source: str,
        claims: Sequence[str] = (),
        scope: dict[str, str | int] | None = None,
    ) -> dict[str, Any]:
        if which == "status":
            # Which plan it judged by: two answers that differ only by it say why.
            return with_plan_source(reader.status(ident, claims, scope), source)
        return reader.history(ident)

    if how == "question":

        def compute() -> dict[str, Any]:
            # Only a status question names claims and a scope; history reads neither.
            asks = asked if which != "history" else {**asked, "claims": [], "scope": {}}
            question = Question.from_json(asks)
            if which == "evidence":
                subject = _current(store, question.identity()).revision
                return reader.evidence(dataclasses.replace(question, subject=subject)).to_json()
            # The asker's checkout named the plan; the server did not prove it.
            source = "asker" if question.plan is not None else "none"
            return judge(
                _current(store, question.identity()),
                source,
                question.claims,
                dict(question.scope),
            )

        return _answer(store, answers, (kind, _key(asked)), compute)
    repo, pr, rev = _parse(asked)
    if not mirrors:
        # The subject comes from the log too: the question alone is the key.
        key: Hashable = (kind, canonical_repo(repo), pr, rev)
        return _answer(store, answers, key, lambda: judge(*judged_from_log(store, repo, pr, rev)))
    # A mirror checkout moves on its own (the team's fetch): identify first,
    # and key the answer by what was identified.
    ident, source = judged_from_log(store, repo, pr, rev, mirrors)
    key = (kind, _key(Question.of(ident).to_json()))
    return _answer(store, answers, key, lambda: judge(ident, source))
