"""Source identity: package globs follow git semantics."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from ledger.evidence.errors import UsageError
from ledger.identity.repoid import canonical_repo
from ledger.identity.source import glob_regex, repo_name
from ledger.plans.governing import identify
from tests.conftest import commit_file


def test_globs_follow_git_semantics() -> None:
    rx = glob_regex("model/**/*.py")
    assert rx.match("model/a.py") and rx.match("model/x/y/a.py")
    assert not rx.match("model/a.pyc") and not rx.match("other/model/a.py")
    assert glob_regex("*.toml").match("plan.toml") and not glob_regex("*.toml").match("a/b.toml")


def test_a_remote_less_repository_is_its_root_commit_not_its_folder(tmp_path: Path) -> None:
    a = git.Repo.init(tmp_path / "one" / "repo", initial_branch="main")
    b = git.Repo.init(tmp_path / "two" / "repo", initial_branch="main")
    commit_file(a, "x.py", "a = 1\n", "first")
    commit_file(b, "x.py", "b = 2\n", "first")
    # Same folder name, unrelated histories: two repositories.
    assert repo_name(a) != repo_name(b)
    assert repo_name(a).startswith("root-commit/")
    # One repository cloned into two folders (the remote removed): one identity.
    clone = a.clone(str(tmp_path / "elsewhere" / "copy"))
    clone.delete_remote(clone.remote("origin"))
    commit_file(clone, "y.py", "c = 3\n", "later work")
    assert repo_name(clone) == repo_name(a)
    assert canonical_repo(repo_name(a)) == repo_name(a)  # stable when read back


def test_fetch_never_takes_a_remote_name_for_an_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    origin = git.Repo.init(tmp_path / "origin", initial_branch="main")
    commit_file(origin, "x.py", "a = 1\n", "first")
    work = origin.clone(str(tmp_path / "work"))
    work.delete_remote(work.remote("origin"))
    planted = tmp_path / "pwned"
    with work.config_writer() as cfg:
        section = f'remote "--upload-pack=touch {planted}; git-upload-pack"'
        cfg.set_value(section, "url", str(tmp_path / "origin"))
        cfg.set_value(section, "fetch", "+refs/heads/*:refs/remotes/x/*")
    with pytest.raises(UsageError):
        identify(work, pr=1)
    assert not planted.exists()


def test_a_fetch_that_hangs_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ledger.identity.source as source

    repo = git.Repo.init(tmp_path / "work", initial_branch="main")
    commit_file(repo, "x.py", "a = 1\n", "first")
    with repo.config_writer() as cfg:
        cfg.set_value("protocol", "allow", "always")
        cfg.set_value('remote "origin"', "url", "ext::sh -c read% x")  # waits for input forever
        cfg.set_value('remote "origin"', "fetch", "+refs/heads/*:refs/remotes/origin/*")
    monkeypatch.setattr(source, "FETCH_TIMEOUT_S", 1)
    with pytest.raises(UsageError, match="PR 1"):
        identify(repo, pr=1)
