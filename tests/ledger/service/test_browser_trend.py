"""A reviewer follows a blocker to its claim's trend, in a real headless
Chromium: from the PR page, the blocking claim's trend link opens a page whose
plot is an SVG drawn on the server, whose table gives the head's change in %
against the base at its scope, keeps the superseded receipt as such, and says
where the base has no receipt at a head's scope; no console error, no serious
axe-core violation, and it reads on a phone. The page's screenshot goes to
docs/screenshots/trend.png."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.service.run import start
from tests.ledger.helpers import run
from tests.ledger.service.browser import (
    axe_violations,
    browser,
    page_width,
    require_browser,
    set_width,
)
from tests.ledger.service.trend_site import ADMISSION, build

require_browser()

from selenium.webdriver.common.by import By  # noqa: E402

SHOTS = Path(__file__).resolve().parents[3] / "docs" / "screenshots"


def test_a_blocker_leads_to_its_claims_trend(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from urllib.parse import urlencode

    db = f"sqlite:///{tmp_path / 'l.db'}"
    monkeypatch.setenv("LEDGER_DB", db)
    site = build(tmp_path, capsys)
    checkout = str(site.repo.working_tree_dir)
    status = run(capsys, "status", "--repo", checkout, "--pr", "4", "--offline", "--json")
    repo = json.loads(status.out)["subject"]["repo"]
    srv = start(db, None, mirrors=[Path(checkout)])
    b = browser(1280, 1600)
    try:
        b.get(f"{srv.url}/pr?{urlencode({'repo': repo, 'pr': 4})}")
        [blocker] = b.find_elements(By.CSS_SELECTOR, f"ol.blockers li[data-claim='{ADMISSION}']")
        blocker.find_element(By.CSS_SELECTOR, f"a[data-trend='{ADMISSION}']").click()
        assert b.current_url.startswith(f"{srv.url}/trend?")
        assert ADMISSION in b.find_element(By.TAG_NAME, "h1").text
        # The plot: an SVG in the page (drawn by the server; the page runs no script).
        [svg] = b.find_elements(By.CSS_SELECTOR, "figure.chart svg.trend")
        assert svg.size["width"] > 600
        assert len(svg.find_elements(By.CSS_SELECTOR, "[data-kind=superseded]")) == 1
        assert b.find_elements(By.TAG_NAME, "script") == []
        rows = {
            r.get_attribute("data-receipt"): r
            for r in b.find_elements(By.CSS_SELECTOR, "table.trend tbody tr")
        }
        head = rows[site.ids["h2"]].text
        assert "+10 %" in head and site.base[1][:12] in head
        assert "estimate looser than the base's" in head
        old = rows[site.ids["h1"]]
        assert old.get_attribute("data-kind") == "superseded"
        assert "superseded" in old.text and "1.28x" in old.text
        no_base = "no base receipt at this scope (device_kind=cuda, gpu_model=A10)"
        assert no_base in rows[site.ids["a10"]].text
        errors = [e for e in b.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []
        assert axe_violations(b) == []
        assert int(b.execute_script("return document.documentElement.scrollWidth")) <= 1280
        SHOTS.mkdir(parents=True, exist_ok=True)
        b.save_screenshot(str(SHOTS / "trend.png"))
        # On a phone, the page reflows (the plot scrolls inside its figure).
        set_width(b, 390)
        assert page_width(b) <= 390
        set_width(b, 1280)
        # And back to the PR.
        b.find_element(By.PARTIAL_LINK_TEXT, "Back to PR #4").click()
        assert b.find_elements(By.CSS_SELECTOR, "ol.blockers")
    finally:
        b.quit()
        srv.stop()
