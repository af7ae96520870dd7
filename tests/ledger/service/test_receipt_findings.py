"""A receipt page leads "What the check found" with the deciding figures, for every
check kind, read from real H200/H100 receipts (evidence/): never an empty heading.
`ledger show` says the same sentences (ledger/read/findings.py)."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ledger.read.findings import findings
from ledger.read.humanize import number
from ledger.read.render import render_show
from ledger.service.run import Running, start
from tests.ledger.evidence_ledgers import Ledger, evidence_ledgers

# (ledger, receipt prefix, check, what the finding must say: the deciding figure)
CASES = [
    (
        "h200-issue11-qwen3",
        "sha256:865b6253ca16",
        "admission",
        "Worst measured/predicted 1.1x > bound 1x at shape 4x2048 (forward_nograd): measured "
        "2.58 GiB "
        "against predicted 2.34 GiB",
    ),
    (
        "cpu-trend",
        "sha256:b3fe9bd036b9",
        "full-prefix-backward",
        "measured increment 13.9 MiB against predicted 8.91 MiB, measured/predicted 1.56; "
        "it passes at 1 or below",
    ),
    (
        "cpu-trend",
        "sha256:fb691ec221f5",
        "full-prefix-backward",
        "measured increment 3.42 MiB against predicted 3.84 MiB, measured/predicted 0.889",
    ),
    (
        "h200-run1",
        "sha256:0081244b3b33",
        "full-prefix-backward",
        "The step prefix1 ended failed before the target was judged.",
    ),
    (
        "h100-thirdparty-frozen-identity",
        "sha256:55cc5e35aaf0",
        "regression-24view",
        "Chunked NLL error against the reference 4.76e-06, allowed 1.05e-05",
    ),
    (
        "h100-thirdparty-frozen-identity",
        "sha256:55cc5e35aaf0",
        "regression-24view",
        "24 views x 512 tokens, forward twice: worst repeat difference 0 (loss) against "
        "tolerance 0 over 2 outputs.",
    ),
    (
        "h200-issue11-moe",
        "sha256:4808631ca0ce",
        "regression-24view",
        "Chunked vs unchunked NLL relative difference 1.75e-07 against tolerance 0.01",
    ),
    (
        "h200-numerics-qwen3",
        "sha256:f3ded53da64a",
        "gradient-compare",
        "function error 0.00151 against allowed 6.23e-05, 24.3 times its allowance.",
    ),
    (
        "h200-issue11-moe",
        "sha256:4e6527d56c64",
        "gradient-compare",
        "Worst relative L2 0 against threshold 0.03: 0 of 256 tensors over it",
    ),
    (
        "h200x2-mesh",
        "sha256:97acec98be5b",
        "mesh-handoff",
        "grew at most 448 MiB (rank 0) across the all-gather handoff, after destroy, "
        "against tolerance 16.0 MiB.",
    ),
    (
        "h100-thirdparty-adapter-identity",
        "sha256:23064c53a7c8",
        "observer-off-control",
        "The observer changed 0 of 13 compared values (observer on: passed, off: passed).",
    ),
    (
        "h200-run2",
        "sha256:dbad7d563d7a",
        "cleanup",
        "grew 160 MiB against 64.0 MiB",
    ),
]


def _ledger(name: str) -> Ledger:
    [led] = [x for x in evidence_ledgers() if x.name == name]
    return led


def _doc(led: Ledger, prefix: str) -> dict[str, Any]:
    [doc] = [d for d in led.shown if d["id"].startswith(prefix)]
    return doc


def found_text(page: str) -> tuple[str, str]:
    """The found section's text, and its markup."""
    sec = page[page.index('id="found-h">') + len('id="found-h">') : page.index('id="facts-h"')]
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", sec)).split()), sec


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Running]]:
    out: dict[str, Running] = {}
    try:
        for name in sorted({c[0] for c in CASES}):
            out[name] = start(_ledger(name).url, None)
        yield out
    finally:
        for srv in out.values():
            srv.stop()


@pytest.mark.parametrize(("name", "prefix", "check", "said"), CASES)
def test_the_page_leads_with_the_deciding_figure(
    servers: dict[str, Running], name: str, prefix: str, check: str, said: str
) -> None:
    doc = _doc(_ledger(name), prefix)
    assert doc["statement"]["predicate"]["check"]["name"] == check
    page = httpx.get(f"{servers[name].url}/receipt/{doc['id']}", timeout=60)
    assert page.status_code == 200
    text, markup = found_text(page.text)
    assert said in text, text
    assert 'data-by="check"' in markup  # measured by Ledger's own check
    # First in the section: the sentences come straight after the heading.
    first = text.removeprefix("What the check found").strip()
    assert first.startswith(findings(doc["statement"]["predicate"]).sentences[0]), first[:200]
    # And `ledger show` says the same.
    assert said in " ".join(render_show(doc, width=2000).split())


def test_counterexamples_and_refusals_are_marked_in_the_findings_table(
    servers: dict[str, Running],
) -> None:
    doc = _doc(_ledger("h200x2-mesh"), "sha256:97acec98be5b")
    page = httpx.get(f"{servers['h200x2-mesh'].url}/receipt/{doc['id']}", timeout=60).text
    _, markup = found_text(page)
    table = markup[markup.index('aria-label="deciding figures"') :]
    assert table.count('data-state="counterexample"') == 2  # both ranks grew past it
    cx = _doc(_ledger("h200-issue11-qwen3"), "sha256:865b6253ca16")
    f = findings(cx["statement"]["predicate"])
    assert f.table is not None and f.table.marks[:2] == ("✘", "✘") and f.over is True
    refused = _doc(_ledger("cpu-trend"), "sha256:5a10f73c6e57")
    f = findings(refused["statement"]["predicate"])
    assert f.table is not None and f.table.marks.count("⊘") == 5 and f.over is False


def test_every_committed_receipt_has_a_finding() -> None:
    kinds = set()
    for led in evidence_ledgers():
        for doc in led.shown:
            if doc["kind"] != "receipt":
                continue
            p = doc["statement"]["predicate"]
            f = findings(p)
            assert f.sentences and all(s.strip() for s in f.sentences), doc["id"]
            # Each known kind reads its own figures, never the fallback line.
            assert "no deciding figure" not in f.sentences[0], doc["id"]
            assert not f.sentences[0].startswith("It records no measured figures"), doc["id"]
            kinds.add(p["check"]["name"])
    assert kinds >= {
        "admission",
        "full-prefix-backward",
        "regression-24view",
        "gradient-compare",
        "mesh-handoff",
        "observer-off-control",
        "cleanup",
    }


def test_the_admission_headline_reads_as_its_key_table() -> None:
    """The findings' worst ratio is the one `max_measured_over_predicted` records
    (admitted shapes only; a counterexample's where there is one)."""
    for led in evidence_ledgers():
        for doc in led.shown:
            p = doc["statement"]["predicate"]
            if doc["kind"] != "receipt" or p["check"]["name"] != "admission":
                continue
            m = p["measurements"]
            lead = findings(p).sentences[0]
            if not lead.startswith("Worst measured/predicted ") or m.get("counterexample_count"):
                continue
            assert f" {number(m['max_measured_over_predicted'])}x " in lead, (doc["id"], lead)
