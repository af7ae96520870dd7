"""`qualify --server` when the server goes away in the middle of the run:
the run completes, the receipts wait in the outbox, `ledger push` delivers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger.evidence.keys import KeyDir
from ledger.remote import outbox
from ledger.service.run import start
from ledger.store.store import Store
from ledger.transparency.audit import audit
from scripts.example_repo import make_example_repo
from tests.ledger.helpers import run

FAST = ("--claim", "cleanup.all-released", "--claim", "regression.24view-nograd")


def test_server_stopped_during_qualify(
    db_url: str,
    key_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LEDGER_DB", db_url)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("LEDGER_SERVER_RETRIES", "0")  # the server stops: nothing to wait for
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    repo = make_example_repo(tmp_path / "repo").path
    srv = start(db_url, KeyDir(key_dir))
    port = int(srv.url.rsplit(":", 1)[1])
    real_send = outbox.send
    sent: list[int] = []

    def send_then_stop(url: str, batch: outbox.Batch, token: str | None) -> Any:
        if sent:
            return real_send(url, batch, token)  # to a stopped server: it fails
        out = real_send(url, batch, token)
        sent.append(len(out))
        srv.stop()  # the server goes away after the first claim was recorded
        return out

    monkeypatch.setattr(outbox, "send", send_then_stop)
    r = run(
        capsys, "qualify", "--pr", "1", "--repo", str(repo), *FAST, "--server", srv.url, "--json"
    )
    # Not judged: the server holds no verdict on what waits in the outbox (exit 3).
    assert r.code == 3, r.err
    assert "[2/2]" in r.err  # the run went on to the end
    assert "1 signed statement(s) kept in the outbox" in r.err, r.err
    ids = [x["id"] for x in json.loads(r.out)["receipts"]]
    assert len(ids) == 2 and sent == [1]
    monkeypatch.setattr(outbox, "send", real_send)

    srv = start(db_url, KeyDir(key_dir), port=port)
    try:
        p = run(capsys, "push", "--server", srv.url)
        assert p.code == 0, p.err
        assert "sent 1, kept 0" in p.out
        again = run(capsys, "push", "--server", srv.url)
        assert "sent 0, kept 0" in again.out
        store = Store.open(db_url)
        assert all(store.entry(i) is not None for i in ids)
        rep = audit(store)
        assert rep.ok and rep.entries == 4, rep.problems  # two keys, two receipts, once each
        store.engine.dispose()
    finally:
        srv.stop()
