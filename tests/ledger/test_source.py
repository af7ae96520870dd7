"""Source identity: package globs follow git semantics."""

from __future__ import annotations

from ledger.source import glob_regex


def test_globs_follow_git_semantics() -> None:
    rx = glob_regex("model/**/*.py")
    assert rx.match("model/a.py") and rx.match("model/x/y/a.py")
    assert not rx.match("model/a.pyc") and not rx.match("other/model/a.py")
    assert glob_regex("*.toml").match("plan.toml") and not glob_regex("*.toml").match("a/b.toml")
