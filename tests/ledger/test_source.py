"""Source identity: package digests agree between git objects and plain file copies."""

from __future__ import annotations

import shutil
from pathlib import Path

import git

from ledger.source import glob_regex, package_digest_of_dir, package_identity
from tests.conftest import commit_file

GLOBS = ["model/**/*.py"]


def test_package_digest_from_a_copy_without_git_matches_the_commit(
    repo: git.Repo, tmp_path: Path
) -> None:
    commit_file(repo, "model/sub/b.py", "y = 2\n", "more")
    commit_file(repo, "docs/readme.md", "not in the package\n", "docs")
    root = Path(repo.working_tree_dir or ".")
    copy = tmp_path / "copy"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns(".git"))
    want = package_identity(repo.head.commit, GLOBS).digest
    assert package_digest_of_dir(copy, GLOBS) == want
    (copy / "docs" / "readme.md").write_text("changed, outside the package\n")
    assert package_digest_of_dir(copy, GLOBS) == want
    (copy / "model" / "a.py").write_text("x = 3\n")
    assert package_digest_of_dir(copy, GLOBS) != want


def test_globs_follow_git_semantics() -> None:
    rx = glob_regex("model/**/*.py")
    assert rx.match("model/a.py") and rx.match("model/x/y/a.py")
    assert not rx.match("model/a.pyc") and not rx.match("other/model/a.py")
    assert glob_regex("*.toml").match("plan.toml") and not glob_regex("*.toml").match("a/b.toml")
