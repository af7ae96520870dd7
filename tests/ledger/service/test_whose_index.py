"""A baseline run is filed under the pull request that asked for it on the web index,
never listed as a revision of its own. A real SQLite ledger and server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from ledger.evidence.keys import KeyDir
from ledger.service.run import start
from ledger.store.store import Store
from ledger.write.hosts import change_host
from ledger.write.ingest import record
from tests.ledger.factories import envelope

BASE, HEAD, OTHER = "b" * 40, "c" * 40, "d" * 40


def _over(commit: str, outcome: str, **env: str) -> dict[str, Any]:
    src: dict[str, Any] = {"repo": "example", "commit": commit, "tree": "2" * 40, "dirty": False}
    if commit == HEAD:
        src |= {"pr": 3, "base": BASE}
    return {
        "source": src,
        "outcome": outcome,
        "reason": None if outcome == "passed" else "peak 9 GiB > admitted 8 GiB",
        "runner": {
            "host": "gpu-host",
            "started": "2026-11-30T00:00:00Z",
            "finished": "2026-11-30T00:00:01Z",
            "ledger_version": "0.1.0",
            "environment": env,
        },
    }


def test_a_baseline_run_is_filed_under_the_pr_that_asked_for_it(
    ledger_env: Path, key_dir: Path
) -> None:
    keys = KeyDir(key_dir)
    runner = keys.load("runner")
    store = Store.open(f"sqlite:///{ledger_env / 'l.db'}")
    change_host(store, "runner", "add", "gpu-host", (), "the GPU host")
    record(store, [envelope(runner, **_over(HEAD, "failed"))])
    asked = f"the head {HEAD} of PR #3"
    record(store, [envelope(runner, **_over(BASE, "passed", baseline_for=asked))])
    # A revision someone asked about for itself stays a revision.
    record(store, [envelope(runner, **_over(OTHER, "passed"))])
    srv = start(f"sqlite:///{ledger_env / 'l.db'}", keys)
    try:
        page = httpx.get(f"{srv.url}/", headers={"Accept": "text/html"}).text
    finally:
        srv.stop()
    pr_row = page[page.index('<tr data-pr="3">') :].split("</tr>")[0]
    assert f'title="the base {BASE} judged for this PR: 1 receipts">baseline ' in pr_row
    revisions = page[page.index("<h3>Revisions</h3>") :]
    assert OTHER[:12] in revisions and BASE[:12] not in revisions
