"""The subject of a question asked without a checkout (`GET /v1/status?repo=R&pr=N`,
the reviewer's pages): the revision as a mirror checkout identifies it where the server
has one (`ledger serve --repo PATH`), else as the log knows it, with the plan the ledger
proves for it. The local side of `ledger.read.reader` answers it
(`LocalReader.subject`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ledger.evidence.errors import Error, InputError, NotFoundError
from ledger.identity.repoid import canonical_repo
from ledger.identity.revision import Revision
from ledger.plans.governing import Identity
from ledger.qualification.plan import Plan
from ledger.store.store import Store

__all__ = [
    "NO_PLAN",
    "PLAN_SOURCES",
    "identity_from_log",
    "judged_from_log",
    "local_plan_source",
    "no_plan_command",
    "with_plan_source",
]

NO_PLAN = "no governing plan recorded"

PLAN_SOURCES: dict[str, str] = {
    "git": "proved from the git objects of a checkout",
    "recorded": "recorded in the ledger by the plans role (or on the ledger's host)",
    "file": "the plan file given to the command (--plan FILE), not proved from git",
    "asker": "the asker's own checkout, posted by `status --server` (not proved by the server)",
    "none": "no plan: none committed, recorded or posted, so no claim is judged by one",
}
"""Which plan an answer judged by (`plan_source` of a status document): every surface
names it, so two answers of the same question that differ only by their plan say why."""


def local_plan_source(has_plan: bool, plan_file: object, server: object) -> str:
    """Which plan a `status` asked in a checkout judges by: posted to a server, the
    asker's own; here, the plan file given or the one proved from git."""
    if not has_plan:
        return "none"
    if server:
        return "asker"
    return "file" if plan_file else "git"


def with_plan_source(doc: dict[str, Any], source: str) -> dict[str, Any]:
    """The status document naming the plan it judged by (`plan_source`, and its words);
    without one, the command that records it (`record_plan`)."""
    doc["plan_source"] = source
    doc["plan_source_text"] = PLAN_SOURCES[source]
    if source == "none":
        doc["record_plan"] = no_plan_command((doc.get("subject") or {}).get("pr"))
    return doc


def no_plan_command(pr: int | None) -> str:
    """What records the plan a PR or revision lacks (`ledger plan record`)."""
    which = "--branch BRANCH" if pr is not None else "--rev COMMIT"
    return f"ledger plan record {which} --server URL"


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


def _holding(mirrors: Sequence[Path], commit: str) -> tuple[Any, str | None]:
    """A checkout the server was given that holds `commit` though its id is none the
    asked one is aliased to (receipts recorded under an earlier id, no `ledger repo
    alias` yet): (the checkout, its id), else (None, None). Holding the very commit
    makes it a checkout of that history: its base branch proves the plan."""
    import git

    from ledger.identity import source

    for path in mirrors:
        try:
            r = source.open_repo(path)
            r.git.cat_file("-e", f"{commit}^{{commit}}")
            return r, source.repo_name(r)
        except (Error, git.GitCommandError):
            continue
    return None, None


def identity_from_log(
    store: Store, repo: str, pr: int | None, rev: str | None, mirrors: Sequence[Path] = ()
) -> Identity:
    """The subject of `judged_from_log`, without the plan's source."""
    return judged_from_log(store, repo, pr, rev, mirrors)[0]


def judged_from_log(
    store: Store, repo: str, pr: int | None, rev: str | None, mirrors: Sequence[Path] = ()
) -> tuple[Identity, str]:
    """The subject, and which plan it is judged by (a key of `PLAN_SOURCES`): as a
    mirror checkout identifies it where the server has one, else as the log knows it
    (a PR's newest recorded head, or a commit).

    The repository is the id the operator aliased the asked one to (`ledger repo
    alias`), its receipts read under it and every earlier id. The newest receipt of
    that repository is one step of a (repo_id, key) index per id: receipts of other
    repositories sharing the PR number are never read, so none can hide the asked
    one. The subject comes from the index row; a body that no longer reads is named
    by the answer's problems. The plan is the base branch's (`governing_plan`),
    proved from git where the server has a checkout of the repository.
    """
    from ledger.identity.aliases import current_id
    from ledger.read.evidence import repo_ids

    want = current_id(store, canonical_repo(repo))
    ids = repo_ids(store, want)
    checkout, mirrored = _from_mirror(mirrors, ids, pr, rev)
    if mirrored is not None:
        judged = dataclasses.replace(
            mirrored, revision=dataclasses.replace(mirrored.revision, repo=want)
        )
        return judged, "git" if judged.plan is not None else "none"
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
    parts: dict[str, str] = {}
    entry = store.entry(row.id)
    if row.package_digest is not None and entry is not None:
        try:
            package = entry.receipt.predicate.source.package
            paths = tuple(package.paths) if package else ()
            parts = dict(package.parts or {}) if package else {}
        except Error:
            pass  # the unreadable body is a problem of the answer (evidence.read_evidence)
    from ledger.plans.ledger import governing_plan

    gov = governing_plan(store, want, pr, row.commit, aliases=ids[1:])
    joined: tuple[str, ...] = ()
    if checkout is None and mirrors:
        checkout, other = _holding(mirrors, row.commit)
        if checkout is not None:
            joined = (
                f"the server's checkout holds this commit under the repository id {other}: "
                f"`ledger repo alias {want} {other} --reason TEXT` joins the two ids",
            )
    plan, said, problems, source = _plan_of(gov, checkout, pr)
    if plan is not None and plan.package is not None:
        paths = tuple(plan.package.paths)
    revision = Revision(
        repo=want,
        commit=row.commit,
        tree=row.tree,
        package_digest=row.package_digest,
        pr=pr,
        package_paths=paths,
        **_definition_parts(plan, row.package_digest, parts),
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
        *joined,
        *gov.notes,
    )
    return Identity(revision, plan, notes, problems=problems), source


UNSHOWN = "unshown"
"""The ``workload`` part of a subject read from the log whose receipt records no workload
definition where its plan names one: no checkout here shows what it was, and no other
commit's receipt shares it."""


def _definition_parts(plan: Plan | None, digest: str | None, parts: dict[str, str]) -> Any:
    """The package parts of a subject read from the log: its receipt's, so receipts of
    the same package identity, workload definition included, carry over as in a
    checkout. Where the receipt records no definition but its plan names one, the
    definition is not known here, and no receipt of another commit is shown to share it
    (each says so)."""
    from ledger.identity.environment_identity import WORKLOAD_PART, prior_digest
    from ledger.qualification.workload_source import names_definition

    if digest is None:
        return {}
    if WORKLOAD_PART in parts:
        return {
            "package_parts": tuple(sorted(parts.items())),
            "prior_package_digest": prior_digest(parts),
        }
    if not names_definition(plan):
        return {}  # as the log always read it
    return {"package_parts": tuple(sorted({**parts, WORKLOAD_PART: UNSHOWN}.items()))}


def _plan_of(
    gov: Any, checkout: Any, pr: int | None
) -> tuple[Plan | None, str, tuple[str, ...], str]:
    """The plan, the note that says where it came from, what keeps it unknown and its
    source (`PLAN_SOURCES`): a
    conflict between plan entries; else, for a PR where the server has a checkout of
    the repository, the plan at the tip of its base branch there (as the CLI proves
    it); else the recorded entry; else none."""
    from ledger.identity import source
    from ledger.plans import governing
    from ledger.qualification.plan import PLAN_FILE

    if gov.conflict_text is not None:
        return None, f"{NO_PLAN}: {gov.conflict_text}", (gov.conflict_text,), "none"
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
            return plan, said, (), "git"
    if gov.found is not None:
        return gov.found.plan, f"plan: {gov.found.text}", (), "recorded"
    return (
        None,
        f"{NO_PLAN}: the ledger holds no plan entry for the base branch of this "
        + ("PR" if pr is not None else "revision")
        + " recorded by the ledger's host or a token with the plans role, and the server "
        "has no checkout of the repository, so no claim is judged (the base branch's job "
        "records it: `ledger plan record --branch BRANCH`)",
        (),
        "none",
    )
