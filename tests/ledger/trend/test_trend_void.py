"""A receipt its revocation voids is no point of a claim's trend, on every surface:
`ledger trend --json` lists it under `void` with why and compares no head with it,
the text says it void with no figure, and neither the PR page's chart nor the trend
page's plots it (each says it void, with why). A revocation that does not count (a
counterexample's without its independent review) voids nothing: that receipt stays a
point. A real git repository, SQLite ledger and server."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from ledger.service.run import start
from ledger.store.store import Store
from tests.conftest import commit_file
from tests.ledger.helpers import run
from tests.ledger.trend.test_trend import CLAIM, _attest, _ledger
from tests.ledger.write.test_revoke import force_revocation

WHY = "ran on a mislabelled host"


@dataclass
class Site:
    db: str
    repo: Path
    base: list[str]
    heads: list[str]
    args: tuple[str, ...]


@pytest.fixture
def site(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Site:
    """Two base commits and four PR heads, each with an admission receipt; the newest
    base receipt and head 2's pass revoked, head 3's counterexample revoked without
    its independent review (so it stands)."""
    db = f"sqlite:///{tmp_path / 'l.db'}"
    monkeypatch.setenv("LEDGER_DB", db)
    r, repo = _ledger(tmp_path, capsys)
    b1 = _attest(capsys, repo, tmp_path, 0.91, "--rev", "HEAD")
    commit_file(r, "model.py", "x = 2\n", "base 2")
    b2 = _attest(capsys, repo, tmp_path, 0.5, "--rev", "HEAD")
    r.git.checkout("-b", "feature")
    ids = []
    for i, ratio in enumerate((0.95, 0.99, 1.07, 0.97), 1):
        head = commit_file(r, "model.py", f"x = {10 + i}\n", f"pr head {i}")
        r.git.update_ref("refs/pull/4/head", head)
        ids.append(_attest(capsys, repo, tmp_path, ratio, "--pr", "4"))
    r.git.checkout("main")
    for rid in (b2, ids[1]):
        assert run(capsys, "revoke", rid, "--reason", WHY).code == 0
    force_revocation(Store.open(db), ids[2], "flaky")
    args = ("trend", "--repo", str(repo), "--pr", "4", "--offline", "--claim", CLAIM)
    return Site(db, repo, [b1, b2], ids, args)


def _cli(site: Site, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    doc = json.loads(run(capsys, *site.args, "--json").out)
    assert isinstance(doc, dict)
    return doc


def test_trend_json_leaves_a_void_receipt_out_and_says_why(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    [t] = _cli(site, capsys)["trends"]
    assert [(p["where"], p["figure"]["value"]) for p in t["points"]] == [
        ("base", 0.91),
        ("PR #4 head 1", 0.95),
        ("PR #4 head 3", 1.07),
        ("PR #4 head 4", 0.97),
    ]
    assert [(v["where"], v["receipt"], v["why"]) for v in t["void"]] == [
        ("base", site.base[1], f"revoked: {WHY}"),
        ("PR #4 head 2", site.heads[1], f"revoked: {WHY}"),
    ]
    # No head is compared with the void base receipt: the newest base point that counts.
    assert {p["change_vs_base"]["base_receipt"] for p in t["points"][1:]} == {site.base[0]}


def test_trend_text_says_a_void_receipt_void_with_no_figure(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    text = run(capsys, *site.args).out
    assert "0.99x" not in text and "0.5x" not in text, text
    folded = " ".join(text.split())
    assert f"PR #4 head 2, not a point: revoked: {WHY}" in folded, text
    assert f"base, not a point: revoked: {WHY}" in folded, text
    assert "1.07x" in text  # the counterexample's revocation is pending: it stands
    assert max(len(line) for line in text.splitlines()) <= 80


def test_the_charts_draw_no_void_receipt_and_say_why(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = _cli(site, capsys)
    [t] = cli["trends"]
    srv = start(site.db, None, mirrors=[site.repo])
    try:
        q = {"repo": cli["repo"], "pr": 4}
        html = {"Accept": "text/html"}
        pr_page = httpx.get(f"{srv.url}/pr?{urlencode(q)}", headers=html, timeout=60).text
        url = f"{srv.url}/trend?{urlencode({**q, 'claim': CLAIM})}"
        page = httpx.get(url, headers=html, timeout=60).text
        doc = httpx.get(url, headers={"Accept": "application/json"}, timeout=60).json()
    finally:
        srv.stop()
    # The PR page's chart: one bar per head that counts; the void one said beneath.
    chart = pr_page.split('id="trend-h"', 1)[1].split("</section>", 1)[0]
    assert re.findall(r'class="value"[^>]*>([^<]+)<', chart) == ["0.95", "1.07", "0.97"]
    void = re.findall(r'<li class="void" data-receipt="([^"]+)">', chart)
    assert void == [site.heads[1]] and f"void, not drawn: revoked: {WHY}" in chart
    # The trend page: the void receipts neither plotted nor in the table, listed with why.
    svg = page.split("<svg", 1)[1].split("</svg>", 1)[0]
    values = re.findall(r'class="value"[^>]*>([^<]+)<', svg)
    assert "0.99x" not in values and "0.5x" not in values and "0.97x" in values, values
    listed = page.split('class="void"', 1)[1].split("</section>", 1)[0]
    assert re.findall(r'data-receipt="([^"]+)"', listed) == [site.base[1], site.heads[1]]
    assert f"revoked: {WHY}" in listed
    assert {k: v for k, v in doc.items() if k not in ("repo", "pr", "base_from")} == t
