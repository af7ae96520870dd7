"""What one run's claims learned to import reaches only the next run of the same tree.

A forked claim names the library modules it imported beyond its fork server's
(``RESULT.modules``): the code under test's word. An earlier release kept that list
per workload entry point, the same for every pull request of a repository, and the
next run's fork server imported it before its first claim, whichever pull request
it served. Here pull request A's claim imports a module (the probe's lazy
``import wave``); pull request B's server, a later commit with another tree, must not
have it, while a second run of A's own tree still does.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import git
import pytest

from ledger.sandbox import find_bwrap
from runners.fork.preload import installed_only
from tests.ledger.helpers import run
from tests.ledger.probe_repo import claim, make_probe_repo, notes

pytestmark = pytest.mark.skipif(
    find_bwrap() is None and os.environ.get("CI") != "true", reason="no bubblewrap"
)


def _wave_preloaded(capsys: pytest.CaptureFixture[str], repo: Path, rev: str) -> bool:
    r = run(capsys, "qualify", "--rev", rev, "--repo", str(repo), "--json")
    assert r.code == 0, r.err
    [setup] = [n for n in notes(r.err) if n.get("event") == "setup"]
    return bool(setup["wave_preloaded"])


def test_one_pull_requests_module_list_never_reaches_anothers_server(
    tmp_path: Path, ledger_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo_path = make_probe_repo(tmp_path / "repo", claim("c.cleanup"))
    repo = git.Repo(repo_path)
    a = repo.head.commit.hexsha
    # Pull request A: its claim imports `wave`, which its server lacked.
    assert _wave_preloaded(capsys, repo_path, a) is False
    # Pull request B: another tree (a file added), the same workload entry point.
    (repo_path / "notes.txt").write_text("b\n")
    repo.index.add(["notes.txt"])
    actor = git.Actor("Probe", "probe@ledger.invalid")
    b = repo.index.commit("b", author=actor, committer=actor).hexsha
    assert _wave_preloaded(capsys, repo_path, b) is False
    # A's own tree again: what its first run learned is imported before the claim.
    assert _wave_preloaded(capsys, repo_path, a) is True


def test_only_installed_modules_outside_every_tree_are_kept(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "pr_pkg").mkdir(parents=True)
    (tree / "pr_pkg" / "__init__.py").write_text("")
    (tree / "pr_mod.py").write_text("")
    names = ["wave", "json.decoder", "pr_pkg", "pr_mod", "no_such_mod_xyz", "x;import os", "sys"]
    sys.path.insert(0, str(tree))
    try:
        # On the path, yet inside a tree under qualification: never kept.
        assert installed_only(names, [tree]) == ["json.decoder", "sys", "wave"]
    finally:
        sys.path.remove(str(tree))
