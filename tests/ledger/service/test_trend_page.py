"""A claim's trend page (`/trend?repo=R&pr=N&claim=C`): a plot drawn on the
server (an inline SVG, no script), the table of each revision's figure with each
head's change in % against the newest base receipt at its scope, superseded
receipts shown as such, the line where the base has no receipt at a head's scope
or none at all; JSON for an API client; and each PR page blocker's link to it."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest

from ledger.service.run import Running, start
from tests.ledger.helpers import run
from tests.ledger.service.trend_site import ADMISSION, PEAK, Site, build

HTML = {"Accept": "text/html"}


@pytest.fixture
def served(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[tuple[Running, Site, str]]:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    monkeypatch.setenv("LEDGER_DB", db)
    site = build(tmp_path, capsys)
    res = run(
        capsys,
        "status",
        "--repo",
        str(site.repo.working_tree_dir),
        "--pr",
        "4",
        "--offline",
        "--json",
    )
    repo = json.loads(res.out)["subject"]["repo"]
    srv = start(db, None, mirrors=[Path(str(site.repo.working_tree_dir))])
    try:
        yield srv, site, repo
    finally:
        srv.stop()


def _text(page: str) -> str:
    """The page's words, tags dropped and whitespace folded."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def test_the_trend_page_plots_and_tabulates_each_head_against_the_base(
    served: tuple[Running, Site, str],
) -> None:
    srv, site, repo = served
    url = f"{srv.url}/trend?{urlencode({'repo': repo, 'pr': 4, 'claim': ADMISSION})}"
    page = httpx.get(url, headers=HTML, timeout=60)
    assert page.status_code == 200, page.text
    body = page.text
    # The plot is drawn here: an inline SVG, and no script anywhere on the page.
    svg = body.split("<svg", 1)[1].split("</svg>", 1)[0]
    assert "<script" not in body
    assert len(re.findall(r'data-kind="base"', svg)) == 2
    assert len(re.findall(r'data-kind="head"', svg)) == 2  # the supersession has no figure
    assert len(re.findall(r'data-kind="superseded"', svg)) == 1
    values = re.findall(r'class="value"[^>]*>([^<]+)<', svg)
    assert values == ["0.8x", "0.9x", "1.28x (superseded)", "0.99x", "1.5x"]
    assert "worst measured/predicted (ratio)" in svg  # the y axis, labelled
    ticks = re.findall(r'class="tick" text-anchor="end">([^<]+)<', svg)
    assert ticks and all(len(re.sub(r"\D", "", t).lstrip("0")) <= 3 for t in ticks)
    # The table: the H200 head against the newest base receipt at the H200 (+10 %).
    rows = {r.split('data-receipt="', 1)[1].split('"', 1)[0]: r for r in body.split("<tr ")[1:]}
    h2 = _text(rows[site.ids["h2"]])
    assert "+10 %" in h2 and f"vs base {site.base[1][:12]} (0.9x)" in h2
    assert 'data-percent="10.0"' in rows[site.ids["h2"]]
    least = "estimate looser than the base's: least measured/predicted 0.000837x vs 0.81x"
    assert f"{least} on the base (-99.9 %)" in h2
    # The superseded receipt stays, marked, with its figure and its change.
    old = rows[site.ids["h1"]]
    assert 'data-kind="superseded"' in old
    assert "superseded" in _text(old) and "1.28x" in old and "+42.2 %" in _text(old)
    assert "records no figure" in _text(rows[site.ids["sup"]])
    # The A10 head: the base never measured there.
    a10 = _text(rows[site.ids["a10"]])
    assert "no base receipt at this scope (device_kind=cuda, gpu_model=A10)" in a10
    assert "%" not in a10.split("failed")[0]


def test_a_claim_the_base_never_measured_says_so(served: tuple[Running, Site, str]) -> None:
    srv, _, repo = served
    url = f"{srv.url}/trend?{urlencode({'repo': repo, 'pr': 4, 'claim': PEAK})}"
    body = _text(httpx.get(url, headers=HTML, timeout=60).text)
    assert "no receipt of this claim on the last 3 base commits" in body
    assert "3.00 GiB" in body


def test_an_api_client_gets_the_trend_as_json(
    served: tuple[Running, Site, str], capsys: pytest.CaptureFixture[str]
) -> None:
    srv, site, repo = served
    url = f"{srv.url}/trend?{urlencode({'repo': repo, 'pr': 4, 'claim': ADMISSION})}"
    doc = httpx.get(url, headers={"Accept": "application/json"}, timeout=60).json()
    assert doc["repo"] == repo and doc["claim"] == ADMISSION and doc["no_base"] is None
    by = {p["receipt"]: p for p in doc["points"]}
    change = by[site.ids["h2"]]["change_vs_base"]
    assert (change["percent"], change["base_receipt"]) == (10.0, site.ids["b2"])
    assert by[site.ids["a10"]]["change_vs_base"] is None
    assert by[site.ids["a10"]]["change_vs_base_reason"].startswith("no base receipt at this scope")
    assert by[site.ids["h2"]]["least_change_vs_base"]["percent"] == -99.9
    [old] = by[site.ids["sup"]]["superseded"]
    assert old["receipt"] == site.ids["h1"] and old["change_vs_base"]["percent"] == 42.2
    # The same document `ledger trend --json` gives, less where the base came from.
    args = ("trend", "--repo", str(site.repo.working_tree_dir), "--pr", "4", "--offline")
    res = run(capsys, *args, "--claim", ADMISSION, "--json")
    assert res.code == 0, res.err
    cli = json.loads(res.out)
    [t] = cli["trends"]
    assert {k: v for k, v in doc.items() if k not in ("repo", "pr", "base_from")} == t


def test_each_blocker_links_to_its_claims_trend(served: tuple[Running, Site, str]) -> None:
    srv, _, repo = served
    page = httpx.get(f"{srv.url}/pr?{urlencode({'repo': repo, 'pr': 4})}", headers=HTML, timeout=60)
    blockers = page.text.split('class="blockers"', 1)[1].split("</ol>", 1)[0]
    link = html.unescape(re.findall(r'href="(/trend\?[^"]+)" data-trend="([^"]+)"', blockers)[0][0])
    # The series of the figure that decides the blocker (its worst ratio, against 1).
    want = {"repo": repo, "pr": 4, "claim": ADMISSION, "figure": "worst-ratio"}
    assert link == f"/trend?{urlencode(want)}"


@pytest.mark.parametrize(
    ("query", "said"),
    [({"pr": "4", "claim": ADMISSION}, "repo: required"), ({"pr": "x", "claim": "c"}, "pr:")],
)
def test_a_bad_question_is_a_400(
    served: tuple[Running, Site, str], query: dict[str, str], said: str
) -> None:
    srv, _, repo = served
    q = {"repo": repo, **query} if "repo: required" not in said else query
    res = httpx.get(f"{srv.url}/trend?{urlencode(q)}", headers={"Accept": "application/json"})
    assert res.status_code == 400 and said in res.json()["error"]
