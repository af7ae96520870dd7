"""The reviewer's pages answer from the server's reader, as its JSON routes do: a
revoked receipt, a counterexample disputed and a review by a key revoked since are
shown by the receipt page as `GET /v1/entries/ID` shows them (its revocation, weighed)
and judged by the PR page as `GET /v1/status` judges them, document for document.
Real SQLite and PostgreSQL ledgers, a real git repository and server."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import git
import httpx
import pytest

from ledger.service.run import Running, start
from tests.ledger.write.test_revoke import Lg, make_lg


@pytest.fixture
def lg(db_url: str, key_dir: Path, repo: git.Repo, capsys: pytest.CaptureFixture[str]) -> Lg:
    return make_lg(db_url, key_dir, repo, capsys)


def _json(srv: Running, path: str) -> Any:
    r = httpx.get(srv.url + path, headers={"accept": "application/json"}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_the_pages_show_what_the_json_routes_answer(lg: Lg) -> None:
    passed = lg.attest("passed")
    failed = lg.attest("failed")
    for args in (
        ("review", passed, "--concur", "--note", "ran as said", "--key", "other"),
        ("review", failed, "--dispute", "--note", "wrong GPU", "--key", "reviewer"),
        ("revoke", passed, "--reason", "ran on a mislabelled host"),
        ("keys", "revoke", "other", "--reason", "laptop lost"),
    ):
        r = lg(*args)
        assert r.code == 0, r.err
    srv = start(lg.db)
    try:
        for rid in (passed, failed):
            shown = _json(srv, f"/v1/entries/{rid}")
            page = _json(srv, f"/receipt/{rid}")
            # The page names each review's signer beside what the route shows (it once
            # looked for a signer the route's reviews do not carry: "unknown key").
            named = [r.pop("reviewer") for r in page["reviews"]]
            assert page == shown
            assert named == ["other" if rid == passed else "reviewer"]
        assert "revocation" in _json(srv, f"/v1/entries/{passed}")
        src = _json(srv, f"/v1/entries/{passed}")["statement"]["predicate"]["source"]
        q = urlencode({"repo": src["repo"], "rev": src["commit"]})
        status = _json(srv, f"/v1/status?{q}")
        assert _json(srv, f"/pr?{q}") == status
        assert status["subject"]["commit"] == src["commit"]
    finally:
        srv.stop()
