"""Stored bytes are trusted as stored, once: a question parses each entry once
per process, never re-applies the untrusted-input bounds to them and never
verifies their signatures again (ingest did; `audit` and `verify` re-check)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger.evidence import dsse, limits
from ledger.evidence.keys import KeyDir
from ledger.identity.revision import Revision
from ledger.plans.governing import Identity
from ledger.read.query import query_status
from ledger.store.cache import ENTRIES
from ledger.store.store import Store
from ledger.transparency.audit import audit
from ledger.write.ingest import record, register_key
from tests.ledger.factories import COMMIT, TREE, envelope


def _counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    calls: list[int] = []
    real = getattr(module, name)

    def counted(*a: Any, **k: Any) -> Any:
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_a_question_reads_stored_entries_once(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.create(db_url)
    runner = KeyDir(tmp_path / "k").create("r")
    register_key(store, "r", "runner", runner.public)
    src = {"repo": "github.com/org/a", "commit": COMMIT, "tree": TREE, "dirty": False, "pr": 7}
    record(store, [envelope(runner, claim=f"c.{i}", source=src) for i in range(3)])
    ask = Identity(Revision("github.com/org/a", COMMIT, TREE, pr=7), None, ())

    nesting = _counting(monkeypatch, limits, "check_nesting")
    signatures = _counting(monkeypatch, dsse, "verify")
    ENTRIES.clear()
    # Asked by name: without a governing plan recorded, nothing is judged unasked.
    asked = [f"c.{i}" for i in range(3)]
    first = query_status(store, ask, claims=asked, scope={})
    misses = ENTRIES.misses
    second = query_status(store, ask, claims=asked, scope={})
    assert first == second
    assert [r.state for r in first.claims if r.scope_role == "required"] == ["qualified"] * 3
    assert ENTRIES.misses == misses, "the second question parsed an entry again"
    assert (nesting, signatures) == ([], []), "stored bytes were checked as untrusted input"

    # The audit is where everything is checked again.
    assert audit(store).ok
    assert len(signatures) == 3 and nesting
    store.engine.dispose()
