"""Source identity read from a real git repository: commit, tree, parents,
merge-base, PR head, dirty flag and package identity."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import git

from ledger.canonical import canonical_bytes
from ledger.errors import NotFoundError, UsageError
from ledger.models import PackageIdentity, Source
from ledger.plan import Plan, load_plan, parse_plan

__all__ = [
    "PLAN_FILE",
    "Revision",
    "glob_regex",
    "open_repo",
    "package_digest_of_dir",
    "package_identity",
    "plan_at",
    "resolve",
    "with_package",
]

PLAN_FILE = "qualification.toml"
PR_REFS = ("refs/pull/{n}/head", "refs/merge-requests/{n}/head")


@dataclass(frozen=True, slots=True)
class Revision:
    repo_name: str
    commit: str
    tree: str
    parents: tuple[str, ...]
    pr: int | None
    base: str | None
    dirty: bool
    package: PackageIdentity | None

    def source(self) -> Source:
        return Source(
            repo=self.repo_name,
            commit=self.commit,
            tree=self.tree,
            parents=list(self.parents),
            pr=self.pr,
            base=self.base,
            dirty=self.dirty,
            package=self.package,
        )


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


def resolve(
    repo: git.Repo,
    *,
    rev: str | None = None,
    pr: int | None = None,
    package_paths: Sequence[str] = (),
    identity_only: bool = False,
) -> Revision:
    """Identity of --rev REV or --pr N (its current head).

    `identity_only` skips what only a new statement needs (merge-base, dirty
    flag): each costs a git process, and queries never use them.
    """
    if (rev is None) == (pr is None):
        raise UsageError("give exactly one of --rev or --pr")
    if pr is not None:
        commit = _pr_commit(repo, pr)
    else:
        try:
            commit = repo.commit(rev)
        except (git.BadName, ValueError):
            raise NotFoundError(f"unknown revision {rev!r}") from None
    # The dirty flag speaks of the work tree, so it only applies when the work
    # tree is the revision being attested.
    dirty = False
    at_head = not repo.bare and repo.head.is_valid() and repo.head.commit.hexsha == commit.hexsha
    if not identity_only and at_head:
        dirty = repo.is_dirty(index=True, working_tree=True, untracked_files=True)
    package = package_identity(commit, package_paths) if package_paths else None
    return Revision(
        repo_name=repo_name(repo),
        commit=commit.hexsha,
        tree=commit.tree.hexsha,
        parents=tuple(p.hexsha for p in commit.parents),
        pr=pr,
        base=None if identity_only else _base(repo, commit),
        dirty=dirty,
        package=package,
    )


def plan_at(repo: git.Repo, commit: str, override: Path | None) -> Plan | None:
    """The plan as committed at the revision (or --plan FILE); None when there is none."""
    if override is not None:
        return load_plan(override)
    try:
        blob = repo.commit(commit).tree / PLAN_FILE
    except KeyError:
        return None
    return parse_plan(blob.data_stream.read().decode(), f"{PLAN_FILE} at {commit[:12]}")


def with_package(repo: git.Repo, revision: Revision, plan_file: Path | None) -> Revision:
    """The revision with the package identity its plan defines (the plan as
    committed at the revision, or `plan_file`); unchanged without a package."""
    plan = plan_at(repo, revision.commit, plan_file)
    if plan is None or plan.package is None:
        return revision
    package = package_identity(repo.commit(revision.commit), plan.package.paths)
    return dataclasses.replace(revision, package=package)


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


def blob_id(content: bytes) -> str:
    """Git's blob id of file content, so a copy without .git hashes the same."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content, usedforsecurity=False).hexdigest()


def package_digest_of_dir(root: Path, globs: Sequence[str]) -> str:
    pairs = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for f in filenames:
            full = Path(dirpath) / f
            rel = full.relative_to(root).as_posix()
            if _matches(rel, globs):
                pairs.append((rel, blob_id(full.read_bytes())))
    return _digest(pairs)
