"""`ledger serve --repo PATH` fetches its checkout's remote before it judges a PR there, at
most once per `--fetch-every`: a head force-pushed on the origin is the head its pages and
its status API judge. A fetch that fails is a note on the answer, never its error."""

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


def _push_pr(origin: git.Repo, text: str) -> str:
    """A new head of PR 7 on the origin, not a descendant of the last (a force-push)."""
    origin.git.checkout("-B", "feature", "main")
    commit_file(origin, "model.py", text, "head")
    origin.git.update_ref("refs/pull/7/head", origin.head.commit.hexsha)
    origin.git.checkout("main")
    return str(origin.commit("refs/pull/7/head").hexsha)


def _get(url: str, path: str, repo_id: str) -> Any:
    got = httpx.get(
        f"{url}{path}?" + urlencode({"repo": repo_id, "pr": 7}),
        headers={"accept": "application/json"},
        timeout=60,
    )
    assert got.status_code == 200, got.text
    return got.json()


def test_a_force_pushed_head_is_the_one_judged(
    tmp_path: Path, db_url: str, key_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: Cap
) -> None:
    monkeypatch.setenv("LEDGER_DB", db_url)
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "h200", "--role", "runner").code == 0
    origin = git.Repo.init(tmp_path / "origin", initial_branch="main")
    commit_file(origin, "qualification.toml", PLAN, "plan")
    first = _push_pr(origin, "x = 1\n")
    # A developer's clone attests the first head (fetching the PR ref from the origin).
    dev = git.Repo.clone_from(str(origin.working_tree_dir), tmp_path / "dev")
    res = run(capsys, "attest", "--claim", "a.passes", "--pr", "7", "--outcome", "passed",
              "--repo", str(dev.working_tree_dir), "--key", "h200")  # fmt: skip
    assert res.code == 0, res.err
    # The server's checkout: a clone that has never fetched the PR's refs itself.
    served = git.Repo.clone_from(str(origin.working_tree_dir), tmp_path / "served")
    asked = run(capsys, "status", "--pr", "7", "--repo", str(dev.working_tree_dir), "--json")
    rid = json.loads(asked.out)["subject"]["repo"]
    mirrors = (Path(str(served.working_tree_dir)),)
    srv = start(db_url, KeyDir(key_dir), mirrors=mirrors, fetch_every=0)
    try:
        page = _get(srv.url, "/pr", rid)
        assert page["subject"]["commit"] == first and page["verdict"]["qualified"]
        second = _push_pr(origin, "x = 2\n")
        for path in ("/pr", "/v1/status"):
            doc = _get(srv.url, path, rid)
            assert doc["subject"]["commit"] == second, path
            assert not doc["verdict"]["qualified"], path  # nothing was run on the new head
            assert doc["plan_source"] == "git"
        # The origin goes away: the checkout as last fetched is judged, and the note says so.
        (tmp_path / "origin").rename(tmp_path / "gone")
        doc = _get(srv.url, "/pr", rid)
        assert doc["subject"]["commit"] == second
        assert any("could not fetch its remote" in n for n in doc["judged"]), doc["judged"]
        api = _get(srv.url, "/v1/status", rid)
        assert any("could not fetch its remote" in n for n in api["judged"]), api["judged"]
        assert str(tmp_path) not in str(api["judged"])  # the server's paths stay its own
    finally:
        srv.stop()
    (tmp_path / "gone").rename(tmp_path / "origin")
    # Bounded: a server that fetched a moment ago does not fetch again for this question.
    srv = start(db_url, KeyDir(key_dir), mirrors=mirrors, fetch_every=3600)
    try:
        assert _get(srv.url, "/pr", rid)["subject"]["commit"] == second
        _push_pr(origin, "x = 3\n")
        assert _get(srv.url, "/pr", rid)["subject"]["commit"] == second
    finally:
        srv.stop()
