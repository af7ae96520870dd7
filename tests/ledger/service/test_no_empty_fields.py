"""No page or terminal field reads as an empty or "?" placeholder: a PR page with
no required scope does not say "required scope: ."; a receipt that records no
runner host (a supersession's) says so in words, on its page and in `ledger show`."""

from __future__ import annotations

import html
import re
from pathlib import Path
from urllib.parse import urlencode

import git
import httpx
import pytest

from ledger.service.run import start
from tests.ledger.helpers import run
from tests.ledger.write.test_write_says_what import _failed


def _text(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def test_no_field_reads_empty_or_a_question_mark(
    repo: git.Repo, key_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    fid = _failed(capsys, repo, ("--db", url))
    new = run(capsys, "supersede", fid, "--reason", "flaky", "--key", "host-b", "--db", url)
    assert new.code == 0, new.err
    nid = new.out.strip()
    shown = run(capsys, "show", nid, "--db", url).out
    assert " on ?" not in shown and "host not recorded" in shown
    srv = start(url, None)
    try:
        receipt = _text(httpx.get(f"{srv.url}/receipt/{nid}", timeout=60).text)
        q = urlencode({"repo": str(repo.working_tree_dir), "rev": repo.head.commit.hexsha})
        pr = _text(httpx.get(f"{srv.url}/pr?{q}", timeout=60).text)
    finally:
        srv.stop()
    assert "runner ?" not in receipt and "host not recorded" in receipt
    assert "required scope: ." not in pr and "required scope:." not in pr


def test_an_ungoverned_pr_page_names_no_empty_scope() -> None:
    """The H200 run's PR #1, recorded before plan entries: no plan governs it."""
    from tests.ledger.evidence_ledgers import evidence_ledgers

    [led] = [x for x in evidence_ledgers() if x.name == "h200-run1"]
    srv = start(led.url, None)
    try:
        pages = [
            _text(httpx.get(f"{srv.url}/pr?{urlencode({'repo': r, 'pr': n})}", timeout=60).text)
            for r, n, _ in led.questions
            if n is not None
        ]
    finally:
        srv.stop()
    assert pages and all("no governing plan recorded" in p for p in pages)
    for p in pages:
        assert "required scope: ." not in p and "required scope:." not in p, p[:400]
