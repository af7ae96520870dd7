"""Every surface names the plan it judged by: proved from git objects (a checkout), recorded
in the ledger by the plans role, the asker's own checkout (posted by `status --server`),
or none. A URL-only host that attests while no plan is recorded gets `qualified` from
`status --server` (its own plan) and `not qualified` on the pages (none recorded): each
says which plan it used, and the page without one gives the command that records it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import git
import httpx
import pytest

from ledger.evidence.keys import KeyDir
from ledger.service.run import start
from tests.conftest import commit_file
from tests.ledger.helpers import run

PLAN = """
[[claims]]
name = "a.passes"
check = "admission"
cleanup = false
"""

Cap = pytest.CaptureFixture[str]


@pytest.fixture
def repo(
    tmp_path: Path, db_url: str, key_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: Cap
) -> git.Repo:
    """A ledger with a runner key, and PR 7 of a repository whose main holds the plan."""
    monkeypatch.setenv("LEDGER_DB", db_url)
    monkeypatch.setenv("LEDGER_OUTBOX", str(tmp_path / "outbox"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "h200", "--role", "runner").code == 0
    r = git.Repo.init(tmp_path / "up", initial_branch="main")
    commit_file(r, "qualification.toml", PLAN, "plan")
    r.git.checkout("-b", "feature")
    commit_file(r, "model.py", "x = 1\n", "change")
    r.git.update_ref("refs/pull/7/head", r.head.commit.hexsha)
    r.git.checkout("main")
    return r


def _status(capsys: Cap, r: git.Repo, *extra: str) -> Any:
    res = run(capsys, "status", "--pr", "7", "--offline", "--repo", str(r.working_tree_dir), *extra)
    assert res.code in (0, 1), res.err
    return json.loads(res.out) if "--json" in extra else res.out


def _page(url: str, repo_id: str, html: bool = False) -> Any:
    accept = "text/html" if html else "application/json"
    got = httpx.get(
        f"{url}/pr?" + urlencode({"repo": repo_id, "pr": 7}), headers={"accept": accept}, timeout=30
    )
    assert got.status_code == 200, got.text
    return got.text if html else got.json()


def test_each_surface_names_the_plan_it_judged_by(
    repo: git.Repo, db_url: str, key_dir: Path, tmp_path: Path, capsys: Cap
) -> None:
    w = str(repo.working_tree_dir)
    srv = start(db_url, KeyDir(key_dir))  # no checkout: the pages know only the ledger
    try:
        # A URL-only host attests; no plan is recorded in the ledger.
        res = run(capsys, "attest", "--claim", "a.passes", "--pr", "7", "--offline", "--outcome",
                  "passed", "--repo", w, "--key", "h200", "--server", srv.url)  # fmt: skip
        assert res.code == 0, res.err
        asked = _status(capsys, repo, "--server", srv.url, "--json")
        assert asked["qualified"] and asked["plan_source"] == "asker"
        said = _status(capsys, repo, "--server", srv.url)
        assert "plan source: the asker's own checkout, posted by `status --server`" in said
        repo_id = asked["subject"]["repo"]
        page = _page(srv.url, repo_id)
        assert not page["verdict"]["qualified"]
        assert page["plan_source"] == "none"
        assert page["record_plan"] == "ledger plan record --branch BRANCH --server URL"
        html = _page(srv.url, repo_id, html=True)
        assert 'data-plan-source="none"' in html
        assert "<code>ledger plan record --branch BRANCH --server URL</code>" in html
        api = httpx.get(f"{srv.url}/v1/status?" + urlencode({"repo": repo_id, "pr": 7})).json()
        assert api["plan_source"] == "none" and api["record_plan"] == page["record_plan"]
        # The ledger's host records main's plan: the pages judge by it, and say so.
        rec = run(capsys, "plan", "record", "--branch", "main", "--repo", w, "--offline")
        assert rec.code == 0, rec.err
        page = _page(srv.url, repo_id)
        assert page["verdict"]["qualified"] and page["plan_source"] == "recorded"
        assert "record_plan" not in page
        html = _page(srv.url, repo_id, html=True)
        assert 'data-plan-source="recorded"' in html and "ledger plan record" not in html
    finally:
        srv.stop()
    # A server given a checkout proves the plan from its git objects.
    srv = start(db_url, KeyDir(key_dir), mirrors=(Path(w),))
    try:
        assert _page(srv.url, repo_id)["plan_source"] == "git"
    finally:
        srv.stop()
    # Here, in the checkout: proved from git; a plan file given is named as such.
    assert _status(capsys, repo, "--json")["plan_source"] == "git"
    assert "plan source: proved from the git objects of a checkout" in _status(capsys, repo)
    loose = tmp_path / "loose.toml"
    loose.write_text(PLAN)
    assert _status(capsys, repo, "--json", "--plan", str(loose))["plan_source"] == "file"
