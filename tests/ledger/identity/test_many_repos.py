"""One ledger for many repositories that share pull-request numbers, commits and
trees: the CLI, `status --server` and `GET /v1/status` give the same states,
from the asked repository's receipts only, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git
import httpx
import pytest
from sqlalchemy import text

from ledger.evidence.keys import KeyDir
from ledger.plans.entry import collect
from ledger.plans.ledger import record_plan
from ledger.service.run import Running, start
from ledger.store.store import Store
from ledger.store.triggers import drop_append_only_triggers
from ledger.write.ingest import init_ledger, record, register_key
from tests.conftest import commit_file
from tests.ledger.factories import envelope
from tests.ledger.helpers import run

REPOS = 1000
ASKED = 500
PR = 42
ADMISSION, CLEANUP = "admission.no-oom-after-admit", "cleanup.complete"
PLAN = f"""
[[claims]]
name = "{ADMISSION}"
check = "admission"
cleanup = true

[[claims]]
name = "{CLEANUP}"
check = "cleanup"
cleanup = true
"""
WANT = {ADMISSION: "qualified", CLEANUP: "failed"}


def name(i: int) -> str:
    return f"github.com/org/repo-{i:04d}"


@dataclass
class Org:
    db: str
    repo: git.Repo
    server: Running
    asked: list[str]
    """The asked repository's receipt ids (admission, cleanup)."""


def _receipt(runner: Any, repo: str, claim: str, outcome: str, head: str, tree: str) -> bytes:
    src = {"repo": repo, "commit": head, "tree": tree, "dirty": False, "pr": PR}
    check = {"name": claim.split(".")[0], "version": "1", "parameters": {}}
    reason = None if outcome == "passed" else "differs"
    return envelope(runner, claim=claim, check=check, source=src, outcome=outcome, reason=reason)


@pytest.fixture
def org(
    db_url: str, tmp_path: Path, key_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Org]:
    r = git.Repo.init(tmp_path / "repo-0500", initial_branch="main")
    r.create_remote("origin", f"git@github.com:org/repo-{ASKED:04d}.git")
    commit_file(r, "qualification.toml", PLAN, "plan")
    head = r.head.commit
    r.git.update_ref(f"refs/pull/{PR}/head", head.hexsha)
    keys = KeyDir(key_dir)
    init_ledger(db_url, keys)
    store = Store.open(db_url)
    runner = keys.create("runner")
    register_key(store, "runner", "runner", runner.public)
    # The asked repository's receipts come first (oldest), logged under a raw
    # URL form; every other repository has the same PR number, commit and tree
    # with the opposite outcomes, all newer.
    raw = f"https://GitHub.com/org/repo-{ASKED:04d}.git"
    mine = [
        _receipt(runner, raw, ADMISSION, "passed", head.hexsha, head.tree.hexsha),
        _receipt(runner, raw, CLEANUP, "failed", head.hexsha, head.tree.hexsha),
    ]
    asked = [rec.id for rec in record(store, mine)]
    # The plan that governs PR N (main's), as a writer records it beside its receipts.
    plan = collect(r, head.hexsha, "qualification.toml")
    for repo in (raw, name(999)):
        record_plan(store, repo, PR, head.hexsha, plan)
    others = [
        _receipt(runner, name(i), claim, outcome, head.hexsha, head.tree.hexsha)
        for i in range(REPOS)
        if i != ASKED
        for claim, outcome in ((ADMISSION, "failed"), (CLEANUP, "passed"))
    ]
    for i in range(0, len(others), 500):
        record(store, others[i : i + 500])
    store.engine.dispose()
    monkeypatch.setenv("LEDGER_DB", db_url)
    srv = start(db_url, keys)
    try:
        yield Org(db_url, r, srv, asked)
    finally:
        srv.stop()


def states(doc: dict[str, Any]) -> dict[str, str]:
    return {c["claim"]: c["state"] for c in doc["claims"] if c["scope_role"] == "required"}


def receipts(doc: dict[str, Any]) -> set[str]:
    return {rid for c in doc["claims"] for rid in c["receipts"]}


def cli_status(capsys: pytest.CaptureFixture[str], org: Org, *extra: str) -> dict[str, Any]:
    res = run(
        capsys,
        "status",
        "--repo",
        str(org.repo.working_tree_dir),
        "--pr",
        str(PR),
        "--offline",
        "--json",
        *extra,
    )
    assert res.code in (0, 1), res.err
    doc: dict[str, Any] = json.loads(res.out)
    return doc


def http_status(org: Org) -> dict[str, Any]:
    r = httpx.get(f"{org.server.url}/v1/status", params={"repo": name(ASKED), "pr": str(PR)})
    assert r.status_code == 200, r.text
    doc: dict[str, Any] = r.json()
    return doc


def test_a_thousand_repositories_sharing_pr_numbers_answer_alike(
    org: Org, capsys: pytest.CaptureFixture[str]
) -> None:
    local = cli_status(capsys, org)
    remote = cli_status(capsys, org, "--server", org.server.url)
    browser = http_status(org)
    assert states(local) == states(remote) == states(browser) == WANT
    # Only the asked repository's receipts decide, in every answer.
    for doc in (local, remote, browser):
        assert receipts(doc) == set(org.asked), doc
        assert doc["subject"]["repo"] == name(ASKED)
        assert doc["problems"] == []
    assert browser["subject"]["commit"] == org.repo.head.commit.hexsha
    # A repository the log does not know is a 404, not another one's answer.
    r = httpx.get(f"{org.server.url}/v1/status", params={"repo": name(REPOS), "pr": str(PR)})
    assert r.status_code == 404 and name(REPOS) in r.json()["error"]
    # Every other repository has its own, opposite answer.
    r = httpx.get(f"{org.server.url}/v1/status", params={"repo": name(999), "pr": str(PR)})
    assert states(r.json()) == {ADMISSION: "failed", CLEANUP: "qualified"}


def test_an_unreadable_body_is_a_problem_of_the_answer(
    org: Org, key_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row changed behind the ledger's back is named by every answer, never
    skipped: the claim it spoke for has no evidence, and the answer is open.

    The server answers a repeated question from memory while the log size is
    unchanged (so the change shows there once the log grows); the CLI reads
    the rows at once."""
    before = http_status(org)
    assert states(before) == WANT
    store = Store.open(org.db)
    with store.engine.begin() as conn:
        drop_append_only_triggers(conn)
        conn.execute(
            text('UPDATE log_entry SET body = \'{"not": "an envelope"\' WHERE entry_id = :i'),
            {"i": org.asked[0]},
        )
    assert http_status(org) == before  # same log size: the kept answer
    register_key(store, "later", "runner", KeyDir(key_dir).create("later").public)
    store.engine.dispose()
    for doc in (
        cli_status(capsys, org),
        cli_status(capsys, org, "--server", org.server.url),
        http_status(org),
    ):
        assert doc["qualified"] is False
        # Without a plan (GET) only claims with readable evidence are listed.
        got = states(doc)
        assert (got.get(ADMISSION, "not-run"), got[CLEANUP]) == ("not-run", "failed"), got
        (problem,) = doc["problems"]
        assert problem.startswith(f"entry 2 ({org.asked[0][:19]}) cannot be read: "), problem
        assert "ledger audit" in problem
    # History names it too, wherever it is asked.
    where = ("--repo", str(org.repo.working_tree_dir), "--pr", str(PR), "--offline")
    r = httpx.get(f"{org.server.url}/v1/history", params={"repo": name(ASKED), "pr": str(PR)})
    for hist in (
        json.loads(run(capsys, "history", *where, "--json").out),
        json.loads(run(capsys, "history", *where, "--json", "--server", org.server.url).out),
        r.json(),
    ):
        (problem,) = hist["problems"]
        assert problem.startswith(f"entry 2 ({org.asked[0][:19]}) cannot be read: "), problem
        assert org.asked[0] not in {e["id"] for e in hist["entries"]}
    assert "problem: entry 2 (" in run(capsys, "history", *where).out
    table = run(
        capsys, "status", "--repo", str(org.repo.working_tree_dir), "--pr", str(PR), "--offline"
    )
    assert table.code == 1 and f"problem: entry 2 ({org.asked[0][:19]}) cannot be read" in table.out
