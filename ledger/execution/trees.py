"""Temporary git worktrees: the revision (and its base) checked out where claims run."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import git

__all__ = ["removed", "worktree"]


@contextlib.contextmanager
def worktree(repo: git.Repo, commit: str, label: str) -> Iterator[Path]:
    """A detached temporary worktree at `commit`, removed on the way out."""
    parent = Path(tempfile.mkdtemp(prefix=f"ledger-{label}-"))
    path = parent / "src"
    repo.git.worktree("add", "--detach", "--force", str(path), commit)
    try:
        yield path
    finally:
        with contextlib.suppress(git.GitCommandError):
            repo.git.worktree("remove", "--force", str(path))
        shutil.rmtree(parent, ignore_errors=True)
        with contextlib.suppress(git.GitCommandError):
            repo.git.worktree("prune")


@contextlib.contextmanager
def removed(path: Path) -> Iterator[None]:
    """``path`` (a folder) removed on the way out."""
    try:
        yield
    finally:
        shutil.rmtree(path, ignore_errors=True)
