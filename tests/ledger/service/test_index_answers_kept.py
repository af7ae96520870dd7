"""The web index answers each PR's and revision's verdict from the server's kept
answers (`ledger.service.answers`), the cache `GET /v1/status` answers from: a second
load of the index, the log unchanged, judges nothing; a new receipt judges again.
A real SQLite ledger and server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.evidence.keys import KeyDir
from ledger.qualification.judge import Gathered, judge
from ledger.qualification.report import StatusReport
from ledger.read import query
from ledger.service.run import start
from ledger.store.store import Store
from ledger.write.hosts import change_host
from ledger.write.ingest import record
from tests.ledger.factories import envelope

HEADS = ["c" * 40, "e" * 40]
REVISION = "d" * 40


def _over(commit: str, pr: int | None, finished: str = "01") -> dict[str, Any]:
    src: dict[str, Any] = {"repo": "example", "commit": commit, "tree": "2" * 40, "dirty": False}
    if pr is not None:
        src |= {"pr": pr, "base": "b" * 40}
    return {
        "source": src,
        "outcome": "passed",
        "runner": {
            "host": "gpu-host",
            "started": "2026-11-30T00:00:00Z",
            "finished": f"2026-11-30T00:00:{finished}Z",
            "ledger_version": "0.1.0",
            "environment": {},
        },
    }


def test_the_index_loaded_again_judges_nothing(
    ledger_env: Path, key_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = KeyDir(key_dir)
    runner = keys.load("runner")
    url = f"sqlite:///{ledger_env / 'l.db'}"
    store = Store.open(url)
    change_host(store, "runner", "add", "gpu-host", (), "the GPU host")
    for pr, head in enumerate(HEADS, 1):
        record(store, [envelope(runner, **_over(head, pr))])
    record(store, [envelope(runner, **_over(REVISION, None))])
    judged: list[Gathered] = []
    real = judge

    def counted(g: Gathered) -> StatusReport:
        judged.append(g)
        return real(g)

    monkeypatch.setattr(query, "judge", counted)
    srv = start(url, keys)
    try:
        html = {"Accept": "text/html"}
        first = httpx.get(f"{srv.url}/", headers=html).text
        # Two PRs and one revision: one judgement each.
        assert len(judged) == 3
        again = httpx.get(f"{srv.url}/", headers=html).text
        assert len(judged) == 3, "the index loaded again judged again"
        assert again == first
        # The JSON route answers from the same kept answers: nothing judged either.
        doc = httpx.get(f"{srv.url}/v1/status", params={"repo": "example", "pr": "1"}).json()
        assert len(judged) == 3
        listed = httpx.get(f"{srv.url}/", headers={"Accept": "application/json"}).json()
        [pr1] = [p for p in listed[0]["prs"] if p["pr"] == 1]
        assert pr1["verdict"] == doc["verdict"]
        # A receipt logged since: the log grew, so every verdict is judged afresh.
        record(store, [envelope(runner, **_over(HEADS[0], 1, finished="02"))])
        httpx.get(f"{srv.url}/", headers=html)
        assert len(judged) == 6
    finally:
        srv.stop()
