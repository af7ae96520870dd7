"""The PR page's heads and reviews are read through the server's reader (the
question's evidence, each review as `GET /v1/entries/ID` shows it), never from its
store: a force-pushed head is still said to be one, and each review still names its
reviewer and when it says it reviewed. A real git repository, SQLite ledger and server."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest

from ledger.service.run import start
from ledger.service.web import views
from tests.conftest import commit_file
from tests.ledger.helpers import run
from tests.ledger.trend.test_trend import _attest, _ledger


def test_heads_and_reviews_are_read_through_the_reader_not_its_store() -> None:
    for f in (views._heads, views._reviews, views._review_of):
        assert ".store" not in inspect.getsource(f), f.__name__


def test_the_pr_page_says_a_force_push_and_names_each_reviewer(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    monkeypatch.setenv("LEDGER_DB", db)
    r, repo = _ledger(tmp_path, capsys)
    assert run(capsys, "keys", "new", "alice", "--role", "reviewer").code == 0
    heads = []
    for i, branch in enumerate(("feature", "rewritten"), 1):
        r.git.checkout("main")
        r.git.checkout("-b", branch)  # the second head descends from main, not the first
        heads.append(commit_file(r, "model.py", f"x = {10 + i}\n", f"pr head {i}"))
        r.git.update_ref("refs/pull/4/head", heads[-1])
        rid = _attest(capsys, repo, tmp_path, 0.9, "--pr", "4")
    r.git.checkout("main")
    said = run(capsys, "review", rid, "--dispute", "--note", "wrong host", "--key", "alice")
    assert said.code == 0, said.err
    review = json.loads(run(capsys, "show", said.out.split()[0], "--json").out)
    when = str(review["statement"]["predicate"]["reviewed"])[:16].replace("T", " ")
    status = run(capsys, "status", "--repo", str(repo), "--pr", "4", "--offline", "--json")
    repo_id = json.loads(status.out)["subject"]["repo"]
    srv = start(db, None)
    try:
        q = urlencode({"repo": repo_id, "pr": 4})
        page = httpx.get(f"{srv.url}/pr?{q}", headers={"Accept": "text/html"}, timeout=60)
    finally:
        srv.stop()
    assert page.status_code == 200, page.text
    rows = {
        m.group(1): m.group(0)
        for m in re.finditer(r'<tr data-head="([0-9a-f]+)".*?</tr>', page.text, re.S)
    }
    assert "force-push" not in rows[heads[0]] and "force-push" in rows[heads[1]]
    disputed = re.search(r'<tr data-state="disputed">.*?</tr>', page.text, re.S)
    assert disputed is not None, page.text
    assert "alice" in disputed.group(0) and when in disputed.group(0), disputed.group(0)
