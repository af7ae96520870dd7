"""The receipt page of a revoked receipt says so and why, with what its verification
established and what it could not (real SQLite and PostgreSQL, a real server)."""

from __future__ import annotations

import html
import re
from pathlib import Path

import git
import httpx
import pytest

from ledger.service.run import start
from tests.ledger.write.test_revoke import Lg, make_lg


@pytest.fixture
def lg(db_url: str, key_dir: Path, repo: git.Repo, capsys: pytest.CaptureFixture[str]) -> Lg:
    return make_lg(db_url, key_dir, repo, capsys)


def test_the_receipt_page_says_it_is_revoked_and_why(lg: Lg) -> None:
    rid = lg.attest("passed")
    assert lg("revoke", rid, "--reason", "ran on a mislabelled host").code == 0
    srv = start(lg.db, None)
    try:
        page = httpx.get(f"{srv.url}/receipt/{rid}", timeout=60).text
    finally:
        srv.stop()
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())
    assert "not verified: revoked: ran on a mislabelled host" in text
    assert "established: signature: verifies by runner" in text
