"""A repeated status question is answered from memory on the server's event loop while
the log is unchanged, and judged again once anything is appended."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

import ledger.service.api as api
from ledger.evidence.keys import KeyDir
from ledger.plans.entry import asserted
from ledger.plans.ledger import record_plan
from ledger.service.run import start
from ledger.store.store import Store
from ledger.write.ingest import init_ledger, record, register_key
from tests.ledger.factories import envelope

COMMIT = "c" * 40
SRC = {"repo": "github.com/org/a", "commit": COMMIT, "tree": "d" * 40, "dirty": False, "pr": 7}


def test_a_kept_answer_skips_the_worker_until_the_log_grows(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = KeyDir(tmp_path / "keys")
    init_ledger(db_url, keys)
    store = Store.open(db_url)
    runner = keys.create("runner")
    register_key(store, "runner", "runner", runner.public)
    record(store, [envelope(runner, claim="cleanup.complete", source=SRC)])
    # The plan that governs the head, so that a question without a checkout judges it.
    plan = b'[[claims]]\nname = "cleanup.complete"\ncheck = "cleanup"\n'
    record_plan(store, "github.com/org/a", 7, COMMIT, asserted(plan, "qualification.toml"))
    worker: list[Any] = []
    real = api.run_in_threadpool

    async def counted(fn: Any, *a: Any, **k: Any) -> Any:
        worker.append(fn.__name__)
        return await real(fn, *a, **k)

    monkeypatch.setattr(api, "run_in_threadpool", counted)
    srv = start(db_url, keys)
    try:
        get = {"repo": "https://GitHub.com/org/a.git", "pr": "7"}
        post = {
            "subject": {"repo": "github.com/org/a", "commit": COMMIT, "tree": "d" * 40},
            "claims": ["cleanup.complete"],
        }

        def ask() -> tuple[dict[str, Any], dict[str, Any]]:
            a = httpx.get(f"{srv.url}/v1/status", params=get)
            b = httpx.post(f"{srv.url}/v1/status", json=post)
            assert a.status_code == b.status_code == 200, (a.text, b.text)
            return a.json(), b.json()

        first = ask()
        assert worker == ["status_from_query", "status_from_question"]
        assert ask() == first and len(worker) == 2  # from memory: no worker thread
        # Anything appended (another process's record) makes the kept answers stale.
        record(
            store,
            [envelope(runner, claim="cleanup.complete", source=SRC, outcome="failed", reason="x")],
        )
        again = ask()
        assert len(worker) == 4 and again != first
        for old, new in zip(first, again, strict=True):
            assert _receipts(new) != _receipts(old)  # judged again: the newer receipt
    finally:
        srv.stop()
        store.dispose()


def _receipts(doc: dict[str, Any]) -> set[str]:
    return {r for c in doc["claims"] for r in c["receipts"]}
