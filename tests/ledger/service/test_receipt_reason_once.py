"""A failed receipt's page gives its reason once: what the receipt means here
(a counterexample, with the recorded reason inside it) does not sit beside the
same recorded reason again. On the H200 Qwen3-MoE counterexample, judged by the
plan its operator asserts (the ledger predates plan entries)."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import httpx
import pytest

from ledger.plans.entry import asserted
from ledger.plans.ledger import record_plan
from ledger.service.run import start
from ledger.store.store import Store

ROOT = Path(__file__).resolve().parents[3]
LEDGER = ROOT / "evidence" / "h200-issue11-qwen3" / "ledger.db"
REPO = "example.invalid/qwen3-moe-lora"
FIGURE = "measured increment 2.58 GiB > predicted 2.34 GiB"


def test_a_failed_receipt_page_gives_its_reason_once(tmp_path: Path) -> None:
    if not LEDGER.is_file():
        pytest.skip("evidence/h200-issue11-qwen3 is not committed")
    db = tmp_path / "ledger.db"
    shutil.copy(LEDGER, db)
    store = Store.open(f"sqlite:///{db}")
    row = store.newest_receipt(REPO, commit_prefix="636307f73c53")
    assert row is not None
    plan = (ROOT / "examples/qwen3_moe/qualification.toml").read_bytes()
    record_plan(store, REPO, None, row.commit, asserted(plan, "qualification.toml"))
    store.dispose()
    srv = start(f"sqlite:///{db}", None)
    try:
        page = httpx.get(f"{srv.url}/receipt/sha256:865b6253ca16", timeout=60).text
    finally:
        srv.stop()
    means = page[page.index('id="means-h"') : page.index('id="found-h"')]
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", means)).split())
    assert "counterexample" in text  # what it means here is said
    assert text.count(FIGURE) == 1, text
