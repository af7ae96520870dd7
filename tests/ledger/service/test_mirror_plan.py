"""A server given a checkout (`ledger serve --repo`) over a committed H200 ledger whose
receipts predate plan entries answers as the terminal does: the plan proved from git at
the tip of the base branch, even before the checkout has fetched the PR's head, under
the repository id `ledger repo alias` made current on every surface."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from ledger.service.run import start
from scripts.example_repo import make_example_repo
from tests.ledger.helpers import run

EVIDENCE = Path(__file__).resolve().parents[3] / "evidence"
COMMITTED = "h200-sandbox"
"""PR 1 of /tmp/ex-sandbox-origin.git: 8 receipts, no plan entry (an earlier release)."""
OLD_ID = "/tmp/ex-sandbox-origin.git"


def _get(url: str, path: str) -> Any:
    r = httpx.get(url + path, headers={"accept": "application/json"}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def _states(v: dict[str, Any]) -> dict[str, Any]:
    return {
        "headline": v["headline"],
        "claims": {c["claim"]: c["state"] for c in v["claims"]},
    }


def test_serve_repo_over_a_committed_ledger_answers_as_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "ledger.db"
    shutil.copy(EVIDENCE / COMMITTED / "ledger.db", copy)
    db = f"sqlite:///{copy}"
    ex = make_example_repo(tmp_path / "ex-sandbox")
    assert ex.origin is not None
    new_id = str(ex.origin)
    alias = run(capsys, "repo", "alias", OLD_ID, new_id, "--reason", "re-made", "--db", db)
    assert alias.code == 0, alias.err
    srv = start(db, mirrors=(ex.path,), fetch_every=0)
    away = tmp_path / "origin-away"
    try:
        # The checkout has not fetched the PR's head yet, and its remote is away (the
        # server's own fetch fails): the server judges the head the log knows under the
        # plan at the tip of main in its checkout.
        ex.origin.rename(away)
        q = {"pr": 1}
        first = {
            asked: _get(srv.url, "/v1/status?" + urlencode({"repo": asked, **q}))
            for asked in (OLD_ID, new_id)
        }
        index = _get(srv.url, "/")
        away.rename(ex.origin)
        terminal = run(
            capsys, "status", "--pr", "1", "--repo", str(ex.path), "--db", db, "--json"
        )  # fmt: skip
        assert terminal.code == 0, terminal.err
        want = _states(json.loads(terminal.out)["verdict"])
        assert want["headline"] == "qualified: 6 of 6 required claims qualified"
        # Now the checkout holds the PR's head (the terminal fetched it): identified there.
        after = _get(srv.url, "/v1/status?" + urlencode({"repo": OLD_ID, **q}))
        page = _get(srv.url, "/pr?" + urlencode({"repo": OLD_ID, **q}))
    finally:
        srv.stop()
    for asked, doc in first.items():
        assert _states(doc["verdict"]) == want, asked
        assert doc["subject"]["repo"] == new_id and doc["subject"]["commit"] == ex.pr_head
        assert any("the server's checkout" in n for n in doc["judged"]), doc["judged"]
        assert any("could not fetch its remote" in n for n in doc["judged"]), doc["judged"]
    assert [r["repo"] for r in index] == [new_id]
    [listed] = index[0]["prs"]
    assert _states(listed["verdict"]) == want
    assert _states(after["verdict"]) == want and _states(page["verdict"]) == want


def test_serve_repo_prints_each_checkouts_repository_id(
    tmp_path: Path, key_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ex = make_example_repo(tmp_path / "ex", with_remote=False)
    db = f"sqlite:///{tmp_path / 'l.db'}"
    assert run(capsys, "init", "--db", db).code == 0
    cmd = [sys.executable, "-m", "ledger", "serve", "--db", db, "--port", "0"]
    bad = subprocess.run(
        [*cmd, "--repo", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2 and "is not a git repository" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    proc = subprocess.Popen(
        [*cmd, "--repo", str(ex.path)], stderr=subprocess.PIPE, text=True
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert line.startswith(f"ledger serve: --repo {ex.path}: repository id root-commit/"), line
