"""The governing plan is evidence: writers record it in the ledger with the git
objects that prove it, so a server without a checkout judges with it and gives the
CLI's answer; without one every reader says "no governing plan recorded"."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import git
import httpx
import pytest

from ledger.evidence.keys import KeyDir
from ledger.plans.entry import collect, plan_body, read_plan_entry
from ledger.plans.objects import object_id
from ledger.service.run import Running, start
from tests.conftest import commit_file
from tests.ledger.helpers import run

PLAN = """
[[claims]]
name = "a.passes"
check = "admission"
cleanup = false

[[claims]]
name = "b.fails"
check = "admission"
cleanup = false

[[claims]]
name = "c.missing"
check = "admission"
cleanup = false

[[claims]]
name = "d.optional"
check = "admission"
cleanup = false
required = false
"""


@pytest.fixture
def ledger(
    tmp_path: Path,
    db_url: str,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> str:
    monkeypatch.setenv("LEDGER_DB", db_url)
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "h200", "--role", "runner").code == 0
    return db_url


@pytest.fixture
def repo(tmp_path: Path) -> git.Repo:
    r = git.Repo.init(tmp_path / "up", initial_branch="main")
    commit_file(r, "model/planner.py", "budget = 1\n", "base")
    commit_file(r, "qualification.toml", PLAN, "plan")
    r.git.checkout("-b", "feature")
    commit_file(r, "model/planner.py", "budget = 2\n", "change")
    r.git.update_ref("refs/pull/7/head", r.head.commit.hexsha)
    r.git.checkout("main")
    return r


def _attest(capsys: pytest.CaptureFixture[str], r: git.Repo, claim: str, outcome: str) -> str:
    res = run(
        capsys, "attest", "--claim", claim, "--pr", "7", "--offline", "--outcome", outcome,
        "--repo", str(r.working_tree_dir), "--key", "h200", "--allow-dirty",
        *(("--reason", "peak 9.1 GiB over 8 GiB") if outcome == "failed" else ()),
    )  # fmt: skip
    assert res.code == 0, res.err
    return res.out.strip()


def _cli(capsys: pytest.CaptureFixture[str], r: git.Repo) -> dict[str, Any]:
    res = run(
        capsys, "status", "--pr", "7", "--offline", "--repo", str(r.working_tree_dir), "--json"
    )
    assert res.code in (0, 1), res.err
    doc: dict[str, Any] = json.loads(res.out)
    return doc


@pytest.fixture
def server(ledger: str, key_dir: Path) -> Iterator[Running]:
    srv = start(ledger, KeyDir(key_dir))  # no mirror: no checkout at all
    try:
        yield srv
    finally:
        srv.stop()


def _get(srv: Running, path: str) -> Any:
    r = httpx.get(srv.url + path, headers={"accept": "application/json"}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def _states(verdict: dict[str, Any]) -> dict[str, Any]:
    return {
        "headline": verdict["headline"],
        "qualified": verdict["qualified"],
        "claims": {c["claim"]: (c["state"], c["required"]) for c in verdict["claims"]},
        "blockers": [(b["claim"], b["state"], b["next"]) for b in verdict["blockers"]],
        "meanings": {r["id"]: r["meaning"] for c in verdict["claims"] for r in c["receipts"]},
    }


def test_a_server_without_a_checkout_gives_the_cli_answer(
    repo: git.Repo, server: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    _attest(capsys, repo, "a.passes", "passed")
    _attest(capsys, repo, "b.fails", "failed")
    _attest(capsys, repo, "d.optional", "passed")
    cli = _cli(capsys, repo)
    want = _states(cli["verdict"])
    assert want["headline"] == "not qualified: 1 of 3 required claims qualified"
    blob = (repo.commit("main").tree / "qualification.toml").hexsha
    assert any(blob[:12] in n for n in cli["judged"])  # says which plan
    q = urlencode({"repo": cli["subject"]["repo"], "pr": 7})
    api = _get(server, f"/v1/status?{q}")
    page = _get(server, f"/pr?{q}")
    [listed] = [p for r in _get(server, "/") for p in r["prs"] if p["pr"] == 7]
    for name, doc in (
        ("api", api["verdict"]),
        ("page", page["verdict"]),
        ("index", listed["verdict"]),
    ):
        assert _states(doc) == want, name
    # It says which plan it judged with: the base commit and the blob, from the ledger.
    base = repo.commit("main").hexsha
    assert any(base[:12] in n and blob[:12] in n for n in api["judged"]), api["judged"]


def test_without_a_recorded_plan_every_reader_says_so(
    repo: git.Repo, server: Running, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Recorded with an explicit plan file: no committed plan goes with the receipts.
    loose = tmp_path / "plan.toml"
    loose.write_text(PLAN)
    res = run(
        capsys, "attest", "--claim", "a.passes", "--pr", "7", "--offline", "--outcome",
        "passed", "--repo", str(repo.working_tree_dir), "--key", "h200", "--plan", str(loose),
    )  # fmt: skip
    assert res.code == 0, res.err
    cli = _cli(capsys, repo)
    q = urlencode({"repo": cli["subject"]["repo"], "pr": 7})
    api = _get(server, f"/v1/status?{q}")
    [listed] = [p for r in _get(server, "/") for p in r["prs"] if p["pr"] == 7]
    for doc in (api["verdict"], _get(server, f"/pr?{q}")["verdict"], listed["verdict"]):
        # Never the default rules: nothing is judged, and the answer says why.
        assert doc["headline"] == "not qualified: no governing plan recorded"
        assert doc["qualified"] is False and doc["claims"] == [] and doc["governed"] is False
    assert any("no governing plan recorded" in n for n in api["judged"])
    # The operator records the base plan for the receipts recorded before: the
    # server then gives the CLI's answer.
    rec = run(
        capsys, "plan", "record", "--pr", "7", "--offline", "--repo", str(repo.working_tree_dir)
    )
    assert rec.code == 0, rec.err
    assert _states(_get(server, f"/v1/status?{q}")["verdict"]) == _states(cli["verdict"])
    again = run(
        capsys, "plan", "record", "--pr", "7", "--offline", "--repo", str(repo.working_tree_dir)
    )
    assert again.out == rec.out and "already recorded" in again.err
    assert json.loads(run(capsys, "audit", "--json").out)["ok"] is True


def test_plan_objects_are_proved_offline(repo: git.Repo) -> None:
    base = repo.commit("main").hexsha
    ev = collect(repo, base, "qualification.toml")
    assert [k for k, _ in ev.objects] == ["commit", "tree", "blob"]
    assert object_id(*ev.objects[0]) == base
    doc = json.loads(plan_body("r", 7, "c" * 40, ev))
    got = read_plan_entry(1, "id", doc)
    assert [c.name for c in got.plan.claims][:2] == ["a.passes", "b.fails"]
    # A changed plan byte no longer reaches the blob the commit names.
    forged = json.loads(json.dumps(doc))
    forged["objects"][2]["data"] = forged["objects"][2]["data"][:-4] + "AAAA"
    with pytest.raises(Exception, match="not among the plan's objects"):
        read_plan_entry(1, "id", forged)


def test_a_writer_through_a_server_records_no_plan_the_base_branch_job_does(
    repo: git.Repo,
    ledger: str,
    key_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ledger.service.auth import new_token

    tokens = tmp_path / "tokens"
    runner = new_token("gpu-host", tokens)
    plans = new_token("ci-main", tokens, ("plans",))
    monkeypatch.setenv("LEDGER_TOKEN", runner)
    monkeypatch.setenv("LEDGER_OUTBOX", str(tmp_path / "outbox"))
    srv = start(ledger, KeyDir(key_dir), tokens=tokens)  # no mirror
    try:
        res = run(
            capsys, "attest", "--claim", "a.passes", "--pr", "7", "--offline", "--outcome",
            "passed", "--repo", str(repo.working_tree_dir), "--key", "h200", "--server", srv.url,
        )  # fmt: skip
        assert res.code == 0, res.err
        cli = _cli(capsys, repo)
        q = urlencode({"repo": cli["subject"]["repo"], "pr": 7})
        # The runner's job runs the PR's code: it says nothing of which plan governs.
        assert _get(srv, f"/v1/status?{q}")["verdict"]["governed"] is False
        rec = run(
            capsys, "plan", "record", "--branch", "main", "--offline", "--repo",
            str(repo.working_tree_dir), "--server", srv.url, "--token", plans,
        )  # fmt: skip
        assert rec.code == 0, rec.err
        api = _get(srv, f"/v1/status?{q}")
    finally:
        srv.stop()
    assert _states(api["verdict"]) == _states(cli["verdict"])
    assert any("by token holder ci-main (plans role)" in n for n in api["judged"]), api["judged"]
