"""A repository's identity with a history: receipts recorded under an earlier id (the
previous release named a remote-less repository by its folder) count under the
current one once the operator logs an alias; until then status names them."""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest

from ledger.evidence.keys import KeyDir
from ledger.store.store import Store
from ledger.write.ingest import record
from tests.conftest import commit_file
from tests.ledger.factories import envelope
from tests.ledger.helpers import run

PLAN = """
[[claims]]
name = "admission.no-oom-after-admit"
check = "admission"
cleanup = false
"""
OLD = "rc-qwen-lora-h200"


@pytest.fixture
def old_receipts(
    tmp_path: Path,
    db_url: str,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> git.Repo:
    monkeypatch.setenv("LEDGER_DB", db_url)
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "h200", "--role", "runner").code == 0
    r = git.Repo.init(tmp_path / OLD, initial_branch="main")  # no remote
    commit_file(r, "qualification.toml", PLAN, "plan")
    head = r.head.commit
    src = {"repo": OLD, "commit": head.hexsha, "tree": head.tree.hexsha, "dirty": False}
    store = Store.open(db_url)
    record(store, [envelope(KeyDir(key_dir).load("h200"), source=src)])
    store.dispose()
    return r


def _status(capsys: pytest.CaptureFixture[str], r: git.Repo) -> tuple[int, dict]:  # type: ignore[type-arg]
    res = run(capsys, "status", "--rev", "HEAD", "--repo", str(r.working_tree_dir), "--json")
    assert res.code in (0, 1), res.err
    return res.code, json.loads(res.out)


def test_receipts_under_an_earlier_id_are_named_then_counted_once_aliased(
    old_receipts: git.Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc = _status(capsys, old_receipts)
    now = doc["subject"]["repo"]
    assert now.startswith("root-commit/") and code == 1
    [row] = doc["verdict"]["claims"]
    assert row["state"] == "not-run"
    hint = f"1 receipt for this exact commit is recorded under repository {OLD}"
    [note] = [n for n in doc["judged"] if hint in n]
    assert f"ledger repo alias {OLD} {now}" in note
    res = run(capsys, "repo", "alias", OLD, now, "--reason", "named by its folder before")
    assert res.code == 0, res.err
    code, doc = _status(capsys, old_receipts)
    assert code == 0 and doc["verdict"]["claims"][0]["state"] == "qualified"
    assert not any("recorded under repository" in n for n in doc["judged"])
    # The alias is a log entry like any other: audited, and refused when it loops.
    assert json.loads(run(capsys, "audit", "--json").out)["ok"] is True
    back = run(capsys, "repo", "alias", now, OLD, "--reason", "x")
    assert back.code == 2 and "cycle" in back.err
