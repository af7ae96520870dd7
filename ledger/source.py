"""Source identity read from a real git repository: commit, tree, parents,
merge-base, PR head, dirty flag, package identity, and the plan that governs.

`identify` is the one way a revision's identity is built, for a new
statement and for a status question alike.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import git

from ledger.canonical import canonical_bytes
from ledger.errors import InputError, NotFoundError, UsageError
from ledger.models import PackageIdentity
from ledger.qualification.plan import PLAN_FILE, Plan, load_plan, parse_plan
from ledger.revision import Revision

__all__ = [
    "Identity",
    "glob_regex",
    "identify",
    "open_repo",
    "package_identity",
    "plan_at",
]

PR_REFS = ("refs/pull/{n}/head", "refs/merge-requests/{n}/head")


@dataclass(frozen=True, slots=True)
class Identity:
    """A revision and the plan that governs it (None: no plan committed there)."""

    revision: Revision
    plan: Plan | None


def open_repo(path: str | Path | None) -> git.Repo:
    where = Path(path or ".").resolve()
    try:
        return git.Repo(where, search_parent_directories=path is None)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise UsageError(f"{where} is not a git repository") from None


def repo_name(repo: git.Repo) -> str:
    """The remote's URL without credentials or .git; else the folder name."""
    try:
        url = repo.remotes.origin.url
    except (AttributeError, IndexError):
        return Path(repo.working_tree_dir or repo.git_dir).name
    url = re.sub(r"^[a-z+]+://[^@/]*@", lambda m: m.group(0).split("//")[0] + "//", url)
    return url.removesuffix(".git").removesuffix("/")


def _pr_commit(repo: git.Repo, pr: int) -> git.Commit:
    for pattern in PR_REFS:
        ref = pattern.format(n=pr)
        try:
            return repo.commit(ref)
        except (git.BadName, ValueError):
            pass
    # Not known locally: fetch it from each remote, GitHub and GitLab styles.
    for remote in repo.remotes:
        for pattern in PR_REFS:
            ref = pattern.format(n=pr)
            try:
                remote.fetch(f"+{ref}:{ref}")
                return repo.commit(ref)
            except (git.GitCommandError, git.BadName, ValueError):
                continue
    raise NotFoundError(f"PR {pr}: no refs/pull/{pr}/head locally or on any remote")


def _base(repo: git.Repo, commit: git.Commit) -> str | None:
    for name in (
        "refs/remotes/origin/HEAD",
        "refs/remotes/origin/main",
        "refs/heads/main",
        "refs/remotes/origin/master",
        "refs/heads/master",
    ):
        try:
            other = repo.commit(name)
        except (git.BadName, ValueError):
            continue
        bases = repo.merge_base(commit, other)
        if bases and isinstance(bases[0], git.Commit):
            return bases[0].hexsha
    return None


def _commit(repo: git.Repo, rev: str | None, pr: int | None) -> git.Commit:
    if (rev is None) == (pr is None):
        raise UsageError("give exactly one of --rev or --pr")
    if pr is not None:
        return _pr_commit(repo, pr)
    try:
        return repo.commit(rev)
    except (git.BadName, ValueError):
        raise NotFoundError(f"unknown revision {rev!r}") from None


def identify(
    repo: git.Repo,
    *,
    rev: str | None = None,
    pr: int | None = None,
    plan_file: Path | None = None,
    for_statement: bool = False,
) -> Identity:
    """Identity of --rev REV or --pr N (its current head), with its plan.

    The package identity is the one the plan (as committed at the revision,
    or `plan_file`) defines. `for_statement` adds what only a new statement
    needs (merge-base, dirty flag): each costs a git process, and queries
    never use them.
    """
    commit = _commit(repo, rev, pr)
    plan = plan_at(repo, commit.hexsha, plan_file)
    paths = tuple(plan.package.paths) if plan is not None and plan.package else ()
    package = package_identity(commit, paths) if paths else None
    # The dirty flag speaks of the work tree, so it only applies when the work
    # tree is the revision being attested.
    dirty = False
    at_head = not repo.bare and repo.head.is_valid() and repo.head.commit.hexsha == commit.hexsha
    if for_statement and at_head:
        dirty = repo.is_dirty(index=True, working_tree=True, untracked_files=True)
    revision = Revision(
        repo=repo_name(repo),
        commit=commit.hexsha,
        tree=commit.tree.hexsha,
        package_digest=package.digest if package else None,
        pr=pr,
        package_paths=paths,
        parents=tuple(p.hexsha for p in commit.parents),
        base=_base(repo, commit) if for_statement else None,
        dirty=dirty,
    )
    return Identity(revision, plan)


def plan_at(repo: git.Repo, commit: str, override: Path | None) -> Plan | None:
    """The plan as committed at the revision (or --plan FILE); None when there is none."""
    if override is not None:
        return load_plan(override)
    try:
        blob = repo.commit(commit).tree / PLAN_FILE
    except KeyError:
        return None
    where = f"{PLAN_FILE} at {commit[:12]}"
    try:
        text = blob.data_stream.read().decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{where}: not UTF-8 text") from None
    return parse_plan(text, where)


@lru_cache(maxsize=256)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """Git-style glob: `**/` spans zero or more folders, `*` and `?` stay in one."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def _matches(path: str, globs: Sequence[str]) -> bool:
    return any(glob_regex(g).match(path) for g in globs)


def _digest(pairs: Iterable[tuple[str, str]]) -> str:
    return hashlib.sha256(canonical_bytes(sorted([p, b] for p, b in pairs))).hexdigest()


def package_identity(commit: git.Commit, globs: Sequence[str]) -> PackageIdentity:
    """sha256 over the sorted (path, git blob id) of the files the globs select."""
    pairs = [
        (str(item.path), item.hexsha)
        for item in commit.tree.traverse()
        if isinstance(item, git.Blob) and _matches(str(item.path), globs)
    ]
    return PackageIdentity(paths=list(globs), digest=_digest(pairs))
