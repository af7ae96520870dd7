"""The shipped code on a worker: each commit unpacked once, its tree checked for every claim.

A Ray worker runs claim after claim (Ray keeps its worker processes for the
tasks that follow); claims of one revision need the same code. The first
claim fetches the git bundle into the worker's repository and checks the
commit out; a later claim of that commit reuses the checkout. Every claim,
first or not, has the commit's tree checked against the one the driver named
before it runs, and a checkout whose tracked files changed (a claim run
without a sandbox can write there) is replaced rather than reused.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import git

__all__ = ["Checkouts", "Shipped"]

KEEP = 4
"""Checkouts kept per worker: a worker serves one revision (and its base) at a time."""


@dataclass(frozen=True, slots=True)
class Shipped:
    """Where a claim's commits are checked out, and whether this claim unpacked any."""

    roots: dict[str, Path]
    unpacked: bool


class Checkouts:
    """Worktrees of shipped commits under ``into``, kept across a worker's claims."""

    def __init__(self, into: Path, keep: int = KEEP) -> None:
        self.into = into
        self.keep = max(1, keep)
        self._repo: git.Repo | None = None
        self._trees: OrderedDict[str, Path] = OrderedDict()
        self._lock = threading.Lock()
        self.fetches = 0
        """Bundles fetched so far (one per new revision, not per claim)."""

    def get(self, bundle: bytes, commits: Sequence[str], tree: str) -> Shipped:
        """Checkouts of ``commits`` (the first is the claim's revision, the rest e.g. its
        base), from the bundle where this worker lacks them. `ValueError` when the first
        commit's tree is not ``tree``."""
        with self._lock:
            repo = self._open()
            fetched = False
            if not all(_has(repo, c) for c in commits):
                self._fetch(repo, bundle)
                fetched = True
            got = repo.git.rev_parse(f"{commits[0]}^{{tree}}")
            if got != tree:
                raise ValueError(f"the shipped commit {commits[0][:12]} has tree {got}, not {tree}")
            roots: dict[str, Path] = {}
            added = False
            for c in commits:
                path = self._trees.get(c)
                if path is not None and not _unchanged(path):
                    self._drop(repo, c)
                    path = None
                if path is None:
                    path = self.into / c[:16]
                    repo.git.worktree("add", "--detach", "--force", str(path), c)
                    self._trees[c] = path
                    added = True
                self._trees.move_to_end(c)
                roots[c] = path
            self._prune(repo, keep=set(commits))
            return Shipped(roots, unpacked=fetched or added)

    def close(self) -> None:
        with self._lock:
            self._trees.clear()
            self._repo = None
            shutil.rmtree(self.into, ignore_errors=True)

    def _open(self) -> git.Repo:
        if self._repo is None:
            self.into.mkdir(parents=True, exist_ok=True)
            self._repo = git.Repo.init(self.into / "repo")
        return self._repo

    def _fetch(self, repo: git.Repo, bundle: bytes) -> None:
        path = self.into / "shipped.bundle"
        path.write_bytes(bundle)
        try:
            repo.git.fetch(str(path), "+refs/ledger/ship/*:refs/ledger/ship/*")
        finally:
            path.unlink(missing_ok=True)
        self.fetches += 1

    def _drop(self, repo: git.Repo, commit: str) -> None:
        path = self._trees.pop(commit)
        with contextlib.suppress(git.GitCommandError):
            repo.git.worktree("remove", "--force", str(path))
        shutil.rmtree(path, ignore_errors=True)
        with contextlib.suppress(git.GitCommandError):
            repo.git.worktree("prune")

    def _prune(self, repo: git.Repo, keep: set[str]) -> None:
        for c in list(self._trees):
            if len(self._trees) <= self.keep:
                return
            if c not in keep:
                self._drop(repo, c)


def _has(repo: git.Repo, commit: str) -> bool:
    try:
        repo.git.cat_file("-e", f"{commit}^{{commit}}")
    except git.GitCommandError:
        return False
    return True


def _unchanged(path: Path) -> bool:
    """The checkout's tracked files are as the commit has them (and it is still there)."""
    if not path.is_dir():
        return False
    try:
        changed = str(git.Repo(path).git.status("--porcelain", "--untracked-files=no"))
    except (git.GitCommandError, git.InvalidGitRepositoryError, git.NoSuchPathError):
        return False
    return changed == ""
