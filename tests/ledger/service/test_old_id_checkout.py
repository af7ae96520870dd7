"""A ledger recorded under an earlier repository id, served with a checkout of the
repository (`ledger serve --repo`) that no alias joins to that id yet: the PR page of the
old id is judged by the plan the checkout proves (it holds the PR's head), never
"the server has no checkout of the repository"."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx

from ledger.service.run import start
from scripts.example_repo import make_example_repo

EVIDENCE = Path(__file__).resolve().parents[3] / "evidence"
OLD_ID = "/tmp/ex-sandbox-origin.git"
"""PR 1 of the committed h200-sandbox ledger: 8 receipts, no plan entry."""


def _get(url: str, path: str) -> Any:
    r = httpx.get(url + path, headers={"accept": "application/json"}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_the_old_ids_page_is_judged_in_the_checkout_given(tmp_path: Path) -> None:
    copy = tmp_path / "ledger.db"
    shutil.copy(EVIDENCE / "h200-sandbox" / "ledger.db", copy)
    ex = make_example_repo(tmp_path / "ex-sandbox")
    srv = start(f"sqlite:///{copy}", mirrors=(ex.path,))
    try:
        q = "?" + urlencode({"repo": OLD_ID, "pr": 1})
        page, api = _get(srv.url, "/pr" + q), _get(srv.url, "/v1/status" + q)
    finally:
        srv.stop()
    for doc in (page, api):
        assert doc["subject"]["repo"] == OLD_ID and doc["subject"]["commit"] == ex.pr_head
        assert doc["verdict"]["headline"] == "qualified: 6 of 6 required claims qualified"
        assert doc["plan_source"] == "git"
        assert not any("no checkout of the repository" in n for n in doc["judged"])
        said = [n for n in doc["judged"] if "holds this commit" in n]
        assert said and f"ledger repo alias {OLD_ID} {ex.origin}" in said[0], doc["judged"]
