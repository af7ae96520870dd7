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
A server started with `--repo PATH` (a mirror clone, fetched by the team's
own cron) answers from that checkout instead, exactly as `status --offline`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ledger.evidence.errors import (
    Error,
    InputError,
    NotFoundError,
    RefusedError,
    first_validation_error,
)
from ledger.identity.repoid import canonical_repo
from ledger.identity.revision import Revision
from ledger.plans.governing import Identity
from ledger.qualification.plan import Plan
from ledger.read.query import history_answer, query_status
from ledger.service.answers import Answers
from ledger.store.store import Store

__all__ = [
    "history_from_query",
    "history_from_question",
    "identity_from_log",
    "question_of",
    "status_from_query",
    "status_from_question",
]

_REVISION_FIELDS = {f.name for f in dataclasses.fields(Revision)}
NO_PLAN = "no governing plan recorded"


def question_of(q: Identity, claims: list[str], scope: dict[str, str | int]) -> dict[str, Any]:
    """What `status --server` posts: the locally identified revision and plan."""
    rev = dataclasses.asdict(q.revision)
    return {
        "subject": rev,
        "plan": q.plan.model_dump(mode="json") if q.plan else None,
        "notes": list(q.notes),
        "claims": claims,
        "scope": scope,
    }


def _identity(doc: dict[str, Any]) -> Identity:
    subject = doc.get("subject")
    if not isinstance(subject, dict) or not set(subject) <= _REVISION_FIELDS:
        raise RefusedError(f"subject: expected an object with fields {sorted(_REVISION_FIELDS)}")
    try:
        fields: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in subject.items()
        }
        revision = Revision(**fields)
        for name in ("repo", "commit", "tree"):
            if not isinstance(getattr(revision, name), str):
                raise TypeError(name)
    except TypeError as e:
        raise RefusedError(f"subject: {e}") from None
    plan = None
    if doc.get("plan") is not None:
        try:
            plan = Plan.model_validate(doc["plan"])
        except ValidationError as e:
            raise RefusedError(f"plan: {first_validation_error(e)}") from None
    notes = doc.get("notes") or []
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise RefusedError("notes: expected a list of strings")
    return Identity(revision, plan, tuple(notes))


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


def _claims_scope(doc: dict[str, Any]) -> tuple[list[str], dict[str, str | int]]:
    claims = doc.get("claims") or []
    scope = doc.get("scope") or {}
    if not isinstance(claims, list) or not all(isinstance(c, str) for c in claims):
        raise RefusedError("claims: expected a list of strings")
    if not isinstance(scope, dict) or not all(
        isinstance(v, str | int) and not isinstance(v, bool) for v in scope.values()
    ):
        raise RefusedError("scope: expected an object of strings and integers")
    return claims, scope


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
    kind: str,
    store: Store,
    question: dict[str, Any],
    mirrors: Sequence[Path],
    answers: Answers | None,
) -> dict[str, Any] | None:
    """The answer kept for a question while the log size is unchanged, or None (the
    caller computes it). ``kind``: ``status``/``history`` (a question document) or
    ``status-get``/``history-get`` (query parameters). Never computes and never
    reads git (a mirror's answer depends on its checkout): cheap enough for the
    server's event loop, so a repeated question skips the worker thread."""
    if answers is None or (mirrors and kind.endswith("-get")):
        return None
    try:
        if kind.endswith("-get"):
            repo, pr, rev = _parse(question)
            key: Hashable = (kind, canonical_repo(repo), pr, rev)
        else:
            key = (kind, _key(question))
        size = store.refresh()
    except Exception:  # bad input or a database error: the worker path says which
        return None
    doc: dict[str, Any] | None = answers.peek(key, size)
    return doc


def _key(doc: Any) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def status_from_question(
    store: Store, doc: dict[str, Any], answers: Answers | None = None
) -> dict[str, Any]:
    def compute() -> dict[str, Any]:
        claims, scope = _claims_scope(doc)
        return query_status(
            store, _current(store, _identity(doc)), claims=claims, scope=scope
        ).to_json()

    return _answer(store, answers, ("status", _key(doc)), compute)


def history_from_question(
    store: Store, doc: dict[str, Any], answers: Answers | None = None
) -> dict[str, Any]:
    def compute() -> dict[str, Any]:
        return history_answer(store, _current(store, _identity(doc)))

    return _answer(store, answers, ("history", _key(doc)), compute)


def _from_mirror(
    mirrors: Sequence[Path], ids: Sequence[str], pr: int | None, rev: str | None
) -> tuple[Any, Identity | None]:
    """The question as the CLI would identify it (`--offline`), in a checkout the
    server was given (`ledger serve --repo PATH`, a mirror the team keeps fetched) whose
    id is the asked repository's or one aliased to it: (the checkout, its identity),
    the identity None where the checkout does not hold the head (a head delivered
    from an outbox before the mirror fetched it), (None, None) without a checkout."""
    from ledger.identity import source
    from ledger.plans import governing

    for path in mirrors:
        try:
            r = source.open_repo(path)
            if source.repo_name(r) not in ids:
                continue
        except Error:
            continue
        try:
            return r, governing.identify(r, rev=rev, pr=pr, plan_file=None, offline=True)
        except Error:
            return r, None
    return None, None


def identity_from_log(
    store: Store, repo: str, pr: int | None, rev: str | None, mirrors: Sequence[Path] = ()
) -> Identity:
    """The subject: as a mirror checkout identifies it where the server has one,
    else as the log knows it (a PR's newest recorded head, or a commit).

    The repository is the id the operator aliased the asked one to (`ledger repo
    alias`), its receipts read under it and every earlier id. The newest receipt of
    that repository is one step of a (repo_id, key) index per id: receipts of other
    repositories sharing the PR number are never read, so none can hide the asked
    one. The subject comes from the index row; a body that no longer reads is named
    by the answer's problems. The plan is the base branch's (`governing_plan`),
    proved from git where the server has a checkout of the repository.
    """
    from ledger.identity.aliases import current_id
    from ledger.read.query import repo_ids

    want = current_id(store, canonical_repo(repo))
    ids = repo_ids(store, want)
    checkout, mirrored = _from_mirror(mirrors, ids, pr, rev)
    if mirrored is not None:
        return dataclasses.replace(
            mirrored, revision=dataclasses.replace(mirrored.revision, repo=want)
        )
    if pr is None and rev is None:
        raise InputError("give pr=N or rev=COMMIT")
    if rev is not None and (len(rev) < 7 or not all(c in "0123456789abcdef" for c in rev.lower())):
        raise InputError(f"rev {rev!r}: expected a commit (7+ hex digits)")

    # The newest receipt under the id or any earlier id the operator aliased to it.
    rows = [
        store.newest_receipt(i, pr=pr)
        if pr is not None
        else store.newest_receipt(i, commit_prefix=(rev or "").lower())
        for i in ids
    ]
    row = max((r for r in rows if r is not None), key=lambda r: r.seq, default=None)
    if row is None:
        what = f"PR #{pr}" if pr is not None else f"revision {rev}"
        raise NotFoundError(f"no receipt for {what} of {want}")
    paths: tuple[str, ...] = ()
    entry = store.entry(row.id)
    if row.package_digest is not None and entry is not None:
        try:
            package = entry.receipt.predicate.source.package
            paths = tuple(package.paths) if package else ()
        except Error:
            pass  # the unreadable body is a problem of the answer (query.read_evidence)
    from ledger.plans.ledger import governing_plan

    gov = governing_plan(store, want, pr, row.commit, aliases=ids[1:])
    plan, said, problems = _plan_of(gov, checkout, pr)
    if plan is not None and plan.package is not None:
        paths = tuple(plan.package.paths)
    revision = Revision(
        repo=want,
        commit=row.commit,
        tree=row.tree,
        package_digest=row.package_digest,
        pr=pr,
        package_paths=paths,
    )
    what = f"PR #{pr} head {row.commit[:12]}" if pr is not None else row.commit[:12]
    notes = (
        f"judged {what}: "
        + (
            "the PR's newest head with receipts in this ledger"
            if pr is not None
            else "the newest commit with receipts that matches the revision asked"
        ),
        said,
        *gov.notes,
    )
    return Identity(revision, plan, notes, problems=problems)


def _plan_of(gov: Any, checkout: Any, pr: int | None) -> tuple[Plan | None, str, tuple[str, ...]]:
    """The plan, the note that says where it came from, and what keeps it unknown: a
    conflict between plan entries; else, for a PR where the server has a checkout of
    the repository, the plan at the tip of its base branch there (as the CLI proves
    it); else the recorded entry; else none."""
    from ledger.identity import source
    from ledger.plans import governing
    from ledger.qualification.plan import PLAN_FILE

    if gov.conflict_text is not None:
        return None, f"{NO_PLAN}: {gov.conflict_text}", (gov.conflict_text,)
    if checkout is not None and pr is not None:
        branch = gov.found.branch if gov.found is not None else None
        try:
            base = source.base_commit(checkout, branch, offline=True)
            plan = governing.plan_at(checkout, base, None)
        except Error:
            plan = None
        if plan is not None:
            name = branch or source.default_branch(checkout)
            said = f"plan: {PLAN_FILE} on base branch {name} ({base[:12]}), the server's checkout"
            return plan, said, ()
    if gov.found is not None:
        return gov.found.plan, f"plan: {gov.found.text}", ()
    return (
        None,
        f"{NO_PLAN}: the ledger holds no plan entry for the base branch of this "
        + ("PR" if pr is not None else "revision")
        + " recorded by the ledger's host or a token with the plans role, and the server "
        "has no checkout of the repository, so no claim is judged (the base branch's job "
        "records it: `ledger plan record --branch BRANCH`)",
        (),
    )


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


def _from_query(
    kind: str,
    store: Store,
    q: dict[str, str],
    mirrors: Sequence[Path],
    answers: Answers | None,
    judge: Callable[[Identity], dict[str, Any]],
) -> dict[str, Any]:
    repo, pr, rev = _parse(q)
    if not mirrors:
        # The subject comes from the log too: the question alone is the key.
        key: Hashable = (kind, canonical_repo(repo), pr, rev)
        return _answer(store, answers, key, lambda: judge(identity_from_log(store, repo, pr, rev)))
    # A mirror checkout moves on its own (the team's fetch): identify first,
    # and key the answer by what was identified.
    ident = identity_from_log(store, repo, pr, rev, mirrors=mirrors)
    key = (kind, _key(question_of(ident, [], {})))
    return _answer(store, answers, key, lambda: judge(ident))


def status_from_query(
    store: Store, q: dict[str, str], mirrors: Sequence[Path] = (), answers: Answers | None = None
) -> dict[str, Any]:
    def judge(ident: Identity) -> dict[str, Any]:
        return query_status(store, ident, claims=None, scope={}).to_json()

    return _from_query("status-get", store, q, mirrors, answers, judge)


def history_from_query(
    store: Store, q: dict[str, str], mirrors: Sequence[Path] = (), answers: Answers | None = None
) -> dict[str, Any]:
    def judge(ident: Identity) -> dict[str, Any]:
        return history_answer(store, ident)

    return _from_query("history-get", store, q, mirrors, answers, judge)
