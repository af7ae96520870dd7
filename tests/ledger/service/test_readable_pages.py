"""The reviewer's pages over every committed H200 evidence ledger (evidence/*/),
in headless Chromium at 1280 px and at 390 px (a phone): no page scrolls
sideways, no reason or blocker shows a float repr or a byte count without its
unit, chart text is at least 11 px, axe-core finds no serious violation; and a
receipt page shows what the check found before where it ran, its long tables
collapsed after ten rows."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest

from ledger.service.run import Running, start
from tests.ledger.evidence_ledgers import Ledger, evidence_ledgers
from tests.ledger.service.browser import (
    axe_violations,
    browser,
    page_width,
    require_browser,
    set_width,
)

require_browser()

from selenium.webdriver.common.by import By  # noqa: E402

DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?![.\w])")
RAW_COUNT = re.compile(r"(?<![\w.:/-])\d{7,}(?![\w.])")

# The text a person reads in reasons, blockers and findings (hidden exact figures left out).
READ = """
const read = (sel) => Array.from(document.querySelectorAll(sel), el => {
  const c = el.cloneNode(true);
  c.querySelectorAll('.vh').forEach(x => x.remove());
  return c.textContent;
});
return [read('.reason, .blockers li, .finding'), read('.records td, .kv td')];
"""
# Each chart text's rendered size: its font size times the drawing's scale.
CHART_TEXT = """
const out = [];
for (const svg of document.querySelectorAll('svg.chart')) {
  const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
  for (const t of svg.querySelectorAll('text')) {
    out.push(parseFloat(getComputedStyle(t).fontSize) * scale);
  }
}
return out;
"""


def float_reprs(texts: list[str]) -> list[str]:
    return [
        d
        for text in texts
        for d in DECIMAL.findall(text)
        if len(d.replace(".", "").lstrip("0")) > 5
    ]


def raw_counts(texts: list[str], ids: set[str]) -> list[str]:
    return [n for text in texts for n in RAW_COUNT.findall(text) if n not in ids]


@pytest.fixture(scope="module")
def chrome() -> Iterator[Any]:
    b = browser()
    try:
        yield b
    finally:
        b.quit()


@pytest.fixture(scope="module", params=evidence_ledgers(), ids=lambda led: led.name)
def served(request: pytest.FixtureRequest) -> Iterator[tuple[Ledger, Running]]:
    led: Ledger = request.param
    srv = start(led.url, None)
    try:
        yield led, srv
    finally:
        srv.stop()


_AXED: set[tuple[str, str]] = set()
"""(page kind, check) already run through axe: each kind of page once, at both widths."""


def _pages(led: Ledger) -> list[tuple[str, str]]:
    pages = [("index", "/")]
    for repo, pr, rev in led.questions:
        q = {"repo": repo, "pr": pr} if pr is not None else {"repo": repo, "rev": rev}
        pages.append(("pr", f"/pr?{urlencode(q)}"))
    for d in led.shown:
        p = d["statement"]["predicate"]
        check = p.get("check", {}).get("name", d["kind"])
        # Each kind of receipt page once (every reason is rendered by the same
        # filter; test_figures reads every one on the other surfaces).
        kind = (check, p.get("outcome"), bool(p.get("reason")))
        if kind not in _SEEN:
            _SEEN.add(kind)
            pages.append((f"receipt {check}", f"/receipt/{d['id']}"))
    return pages


_SEEN: set[tuple[str, object, bool]] = set()


def test_every_page_reads_at_1280_and_390(served: tuple[Ledger, Running], chrome: Any) -> None:
    led, srv = served
    ids = {d["id"][7:19] for d in led.shown} | {s["subject"]["commit"][:12] for s in led.statuses}
    for kind, path in _pages(led):
        for width in (1280, 390):
            set_width(chrome, width)
            chrome.get(srv.url + path)
            where = (led.name, path, width)
            assert chrome.find_element(By.TAG_NAME, "h1").text, where
            assert page_width(chrome) <= width, where
            sentences, cells = chrome.execute_script(READ)
            # Reasons and blockers: figures in units; every value on the page: no repr.
            assert float_reprs(sentences + cells) + raw_counts(sentences, ids) == [], where
            sizes = chrome.execute_script(CHART_TEXT)
            assert all(s >= 10.99 for s in sizes), (where, min(sizes))
            if (kind, str(width)) not in _AXED:
                _AXED.add((kind, str(width)))
                assert axe_violations(chrome) == [], where
    set_width(chrome, 1280)


def test_a_receipt_page_shows_the_finding_first(
    served: tuple[Ledger, Running], chrome: Any
) -> None:
    led, srv = served
    for d in led.shown:
        check = d["statement"]["predicate"].get("check", {}).get("name")
        if check not in ("admission", "gradient-compare", "cleanup"):
            continue
        chrome.get(f"{srv.url}/receipt/{d['id']}")
        headings = [h.text for h in chrome.find_elements(By.TAG_NAME, "h2")]
        assert headings.index("What the check found") < headings.index("What ran, where")
        found = chrome.find_element(By.CSS_SELECTOR, "#found-h").find_element(By.XPATH, "..")
        text = found.text
        if check == "admission":
            assert "Worst measured/predicted" in text and "predicted" in text
            heads = [
                th.get_attribute("textContent")
                for th in found.find_elements(By.CSS_SELECTOR, "thead th")
            ]
            assert heads[:6] == [
                "mark",
                "shape",
                "phase",
                "predicted_bytes",
                "measured_bytes",
                "measured_over_predicted",
            ]
        if check == "gradient-compare":
            assert "Worst tensors beside their allowance" in text
        if check == "cleanup":
            assert "resources released" in text
        # Ten rows of a long table, the rest one click away with their count.
        for table in found.find_elements(By.CSS_SELECTOR, ".records > table tbody"):
            assert len(table.find_elements(By.TAG_NAME, "tr")) <= 10
        for summary in found.find_elements(By.CSS_SELECTOR, ".records > details > summary"):
            assert re.fullmatch(r"\d+ more rows", summary.get_attribute("textContent"))
