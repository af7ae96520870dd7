"""Who says which plan governs a pull request, and which plan that is: the plan at the
tip of the base branch, recorded by the ledger's host or by a token with the plans
role (the job that runs on the base branch after a merge), never by a runner token (a
pull request's job, running the pull request's code). Every surface (the status API,
the PR page, the index, `status --server` from a checkout) gives one answer for every
head of the PR: one delivered from an outbox, one under an aliased repository id."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import git
import httpx
import pytest

from ledger.evidence.keys import KeyDir
from ledger.plans.entry import PlanEvidence, collect, plan_body
from ledger.plans.objects import object_id
from ledger.service.auth import new_token
from ledger.service.run import Running, start
from tests.conftest import commit_file
from tests.ledger.helpers import run

LAX = """
[[claims]]
name = "a.passes"
check = "admission"
cleanup = false
"""

STRICT = (
    LAX
    + """
[[claims]]
name = "b.required"
check = "admission"
cleanup = false
"""
)


@pytest.fixture
def ledger(
    db_url: str,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> str:
    monkeypatch.setenv("LEDGER_DB", db_url)
    monkeypatch.setenv("LEDGER_OUTBOX", str(tmp_path / "outbox"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "h200", "--role", "runner").code == 0
    return db_url


@pytest.fixture
def repo(tmp_path: Path) -> git.Repo:
    """main holds the strict plan; PR 7 branched when main's plan was lax."""
    r = git.Repo.init(tmp_path / "up", initial_branch="main")
    commit_file(r, "model/planner.py", "budget = 1\n", "base")
    commit_file(r, "qualification.toml", LAX, "lax plan")
    r.git.checkout("-b", "feature")
    commit_file(r, "model/planner.py", "budget = 2\n", "change")
    r.git.update_ref("refs/pull/7/head", r.head.commit.hexsha)
    r.git.checkout("main")
    commit_file(r, "qualification.toml", STRICT, "stricter plan")
    return r


@pytest.fixture
def tokens(tmp_path: Path) -> tuple[Path, str, str]:
    """The tokens file, a runner token (the PR's job) and a plans token (main's job)."""
    path = tmp_path / "tokens"
    return path, new_token("gpu-host", path), new_token("ci-main", path, ("plans",))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server(ledger: str, key_dir: Path, tokens: tuple[Path, str, str]) -> Iterator[Running]:
    srv = start(ledger, KeyDir(key_dir), tokens=tokens[0])  # no checkout at all
    try:
        yield srv
    finally:
        srv.stop()


def _attest(capsys: pytest.CaptureFixture[str], r: git.Repo, *extra: str) -> Any:
    return run(
        capsys, "attest", "--claim", "a.passes", "--pr", "7", "--offline", "--outcome",
        "passed", "--repo", str(r.working_tree_dir), "--key", "h200", "--allow-dirty", *extra,
    )  # fmt: skip


def _cli(capsys: pytest.CaptureFixture[str], r: git.Repo, *extra: str) -> dict[str, Any]:
    res = run(
        capsys, "status", "--pr", "7", "--offline", "--repo", str(r.working_tree_dir),
        "--json", *extra,
    )  # fmt: skip
    assert res.code in (0, 1), res.err
    doc: dict[str, Any] = json.loads(res.out)
    return doc


def _get(srv: Running, path: str) -> Any:
    r = httpx.get(srv.url + path, headers={"accept": "application/json"}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def _headline(doc: dict[str, Any]) -> str:
    return str(doc["verdict"]["headline"])


def _surfaces(srv: Running, repo_id: str, pr: int = 7) -> dict[str, Any]:
    """The verdict of the status API, the PR page and the index, by surface."""
    q = urlencode({"repo": repo_id, "pr": pr})
    listed = [
        p["verdict"]
        for r in _get(srv, "/")
        if r["repo"] == repo_id
        for p in r["prs"]
        if p["pr"] == pr
    ]
    return {
        "api": _get(srv, f"/v1/status?{q}")["verdict"],
        "page": _get(srv, f"/pr?{q}")["verdict"],
        "index": listed[0] if listed else None,
    }


def _post(srv: Running, doc: Any, token: str) -> httpx.Response:
    return httpx.post(
        srv.url + "/v1/plans", json=doc, headers={"authorization": f"Bearer {token}"}, timeout=30
    )


def _fabricated(plan: str) -> PlanEvidence:
    """A plan 'committed' at a base commit made up for it: its objects chain only to
    themselves (a tree holding the plan, a commit naming the tree)."""
    blob = plan.encode()
    bid = object_id("blob", blob)
    tree = b"100644 qualification.toml\0" + bytes.fromhex(bid)
    commit = (
        f"tree {object_id('tree', tree)}\nauthor x <x@x> 0 +0000\n"
        "committer x <x@x> 0 +0000\n\nmine\n"
    ).encode()
    base = object_id("commit", commit)
    return PlanEvidence(
        base, "qualification.toml", bid, (("commit", commit), ("tree", tree), ("blob", blob))
    )


def test_a_runner_token_never_chooses_the_plan(
    repo: git.Repo,
    server: Running,
    tokens: tuple[Path, str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, runner, plans = tokens
    main = repo.commit("main").hexsha
    assert _attest(capsys, repo).code == 0
    repo_id = _cli(capsys, repo)["subject"]["repo"]
    before = _surfaces(server, repo_id)
    assert (
        _headline({"verdict": before["api"]}) == "not qualified: 1 of 2 required claims qualified"
    )
    head = repo.commit("refs/pull/7/head").hexsha
    one_claim = LAX
    attacks = {
        # The PR's own (one-claim) plan, proved by its own head commit.
        "own head": collect(repo, head, "qualification.toml"),
        # A one-claim plan on a base commit made up for it.
        "fabricated base": _fabricated(one_claim),
    }
    for name, ev in attacks.items():
        doc = json.loads(plan_body(repo_id, 7, head, ev))
        got = _post(server, doc, runner)
        assert got.status_code == 403, (name, got.text)
        assert "lacks the 'plans' role" in got.json()["error"]
    # An asserted plan (no commit proves it) comes from the ledger's host only: not
    # even the plans role sends one.
    asserted = json.loads(plan_body(repo_id, 7, head, _asserted(one_claim)))
    got = _post(server, asserted, plans)
    assert got.status_code == 403 and "ledger's host" in got.json()["error"], got.text
    assert _post(server, asserted, runner).status_code == 403
    # The CLI with a runner token: one line, nothing written.
    res = run(capsys, "plan", "record", "--branch", "main", "--repo", str(repo.working_tree_dir),
              "--offline", "--server", server.url, "--token", runner)  # fmt: skip
    assert res.code in (1, 2) and res.out == "" and "lacks the 'plans' role" in res.err
    assert len(res.err.strip().splitlines()) == 1, res.err
    assert _surfaces(server, repo_id) == before
    # The plans role records a proved plan of the base branch (its tip's), once.
    ok = json.loads(
        plan_body(repo_id, None, main, collect(repo, main, "qualification.toml"), branch="main")
    )
    assert _post(server, ok, plans).status_code == 201
    assert _post(server, ok, plans).status_code == 200
    assert _surfaces(server, repo_id) == before


def _asserted(text: str) -> PlanEvidence:
    from ledger.plans.entry import asserted

    return asserted(text.encode(), "qualification.toml")


def test_entries_runner_tokens_recorded_before_stop_governing(
    repo: git.Repo,
    server: Running,
    ledger: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ledger.plans.ledger import record_plan
    from ledger.store.store import Store

    # With an explicit plan file: the writer records no plan entry of its own.
    loose = tmp_path / "loose.toml"
    loose.write_text(STRICT)
    assert _attest(capsys, repo, "--plan", str(loose)).code == 0
    repo_id = _cli(capsys, repo)["subject"]["repo"]
    head = repo.commit("refs/pull/7/head").hexsha
    # As an earlier release logged what a runner token sent: the PR's own lax plan.
    own = collect(repo, head, "qualification.toml")
    record_plan(Store.open(ledger), repo_id, 7, head, own, "gpu-host")
    q = urlencode({"repo": repo_id, "pr": 7})
    api = _get(server, f"/v1/status?{q}")
    assert _headline(api) == "not qualified: no governing plan recorded"
    assert any("token holder gpu-host under a runner token and does not govern" in n
               for n in api["judged"]), api["judged"]  # fmt: skip
    # The operator re-records it on the ledger's host: the base branch's plan governs.
    rec = run(
        capsys, "plan", "record", "--pr", "7", "--offline", "--repo", str(repo.working_tree_dir)
    )
    assert rec.code == 0, rec.err
    for name, v in _surfaces(server, repo_id).items():
        assert v["headline"] == "not qualified: 1 of 2 required claims qualified", name


def test_an_outbox_head_is_judged_the_same_everywhere(
    repo: git.Repo,
    ledger: str,
    key_dir: Path,
    tokens: tuple[Path, str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, runner, plans = tokens
    monkeypatch.setenv("LEDGER_SERVER_RETRIES", "0")  # the server goes down: nothing to wait for
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    srv = start(ledger, KeyDir(key_dir), tokens=path, port=port)
    try:
        # main's post-merge job records main's plan; the PR's job attests with a runner token.
        w = str(repo.working_tree_dir)
        rec = run(capsys, "plan", "record", "--branch", "main", "--repo", w, "--offline",
                  "--server", url, "--token", plans)  # fmt: skip
        assert rec.code == 0, rec.err
        monkeypatch.setenv("LEDGER_TOKEN", runner)
        assert _attest(capsys, repo, "--server", url).code == 0
    finally:
        srv.stop()
    # The next head is attested while the server is down: its receipt waits in the outbox.
    repo.git.checkout("feature")
    commit_file(repo, "model/planner.py", "budget = 3\n", "second head")
    repo.git.update_ref("refs/pull/7/head", repo.head.commit.hexsha)
    repo.git.checkout("main")
    kept = _attest(capsys, repo, "--server", url)
    assert kept.code == 3 and "kept in the outbox" in kept.err, kept.err  # not judged yet
    srv = start(ledger, KeyDir(key_dir), tokens=path, port=port)
    try:
        pushed = run(capsys, "push", "--server", url, "--json")
        assert pushed.code == 0, pushed.err
        cli = _cli(capsys, repo, "--server", url)
        assert cli["subject"]["commit"] == repo.commit("refs/pull/7/head").hexsha
        want = cli["verdict"]["headline"]
        assert want == "not qualified: 1 of 2 required claims qualified"
        surfaces = _surfaces(srv, cli["subject"]["repo"])
        api = _get(srv, "/v1/status?" + urlencode({"repo": cli["subject"]["repo"], "pr": 7}))
    finally:
        srv.stop()
    for name, v in surfaces.items():
        assert v["headline"] == want, (name, v["headline"])
    assert api["subject"]["commit"] == cli["subject"]["commit"]
    # It names who recorded the plan: main's job, under the plans role.
    assert any("by token holder ci-main (plans role)" in n for n in api["judged"]), api["judged"]


def test_a_pr_branched_before_a_stricter_plan_is_judged_by_the_stricter_one(
    repo: git.Repo,
    ledger: str,
    key_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    w = str(repo.working_tree_dir)
    strict, lax = repo.commit("main").hexsha, repo.commit("main~1").hexsha
    # main's job recorded the lax plan when it was main's tip; then the stricter one.
    for tip in (lax, strict):
        repo.git.update_ref("refs/heads/main", tip)
        rec = run(capsys, "plan", "record", "--branch", "main", "--repo", w, "--offline")
        assert rec.code == 0, rec.err
    assert _attest(capsys, repo).code == 0
    cli = _cli(capsys, repo)
    want = "not qualified: 1 of 2 required claims qualified"
    assert cli["verdict"]["headline"] == want
    # A mirror of main (no PR refs): the server proves the plan from git, as the CLI.
    mirror = git.Repo.clone_from(w, tmp_path / "mirror", branch="main")
    mirror.delete_remote(mirror.remote("origin"))
    for mirrors in ((), (tmp_path / "mirror",)):
        srv = start(ledger, KeyDir(key_dir), mirrors=mirrors)
        try:
            for name, v in _surfaces(srv, cli["subject"]["repo"]).items():
                assert v["headline"] == want, (mirrors, name, v["headline"])
        finally:
            srv.stop()


def test_two_plans_for_one_commit_are_a_conflict(
    repo: git.Repo, server: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _attest(capsys, repo).code == 0
    repo_id = _cli(capsys, repo)["subject"]["repo"]
    head = repo.commit("refs/pull/7/head").hexsha
    files = []
    for n, text in enumerate((STRICT, LAX)):
        f = tmp_path / f"plan{n}.toml"
        f.write_text(text)
        files.append(f)
        res = run(capsys, "plan", "assert", str(f), "--repository", repo_id, "--commit", head,
                  "--pr", "7")  # fmt: skip
        assert res.code == 0, res.err
    # Never the later one silently replacing the earlier: every surface names the conflict.
    for name, v in _surfaces(server, repo_id).items():
        assert v["headline"] == "not qualified: conflicting governing plans recorded", (name, v)
    api = _get(server, "/v1/status?" + urlencode({"repo": repo_id, "pr": 7}))
    assert any("conflicting governing plans" in p for p in api["problems"]), api["problems"]
    page = httpx.get(
        server.url + "/pr?" + urlencode({"repo": repo_id, "pr": 7}),
        headers={"accept": "text/html"},
        timeout=30,
    )
    assert page.status_code == 200 and "conflicting governing plans" in page.text


def test_two_plans_for_one_base_branch_commit_are_a_conflict(
    repo: git.Repo, server: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = str(repo.working_tree_dir)
    assert _attest(capsys, repo).code == 0
    repo_id = _cli(capsys, repo)["subject"]["repo"]
    tip = repo.commit("main").hexsha
    assert run(capsys, "plan", "record", "--branch", "main", "--repo", w, "--offline").code == 0
    lax = tmp_path / "lax.toml"
    lax.write_text(LAX)
    res = run(capsys, "plan", "assert", str(lax), "--repository", repo_id, "--commit", tip,
              "--branch", "main")  # fmt: skip
    assert res.code == 0, res.err
    for name, v in _surfaces(server, repo_id).items():
        assert v["headline"] == "not qualified: conflicting governing plans recorded", (name, v)
    api = _get(server, "/v1/status?" + urlencode({"repo": repo_id, "pr": 7}))
    [problem] = [p for p in api["problems"] if "conflicting governing plans" in p]
    assert tip[:12] in problem and "on the ledger's host" in problem


def test_an_alias_moves_receipts_and_plans_on_every_surface(
    repo: git.Repo, server: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = str(repo.working_tree_dir)
    assert _attest(capsys, repo).code == 0
    old = _cli(capsys, repo)["subject"]["repo"]
    assert old.startswith("root-commit/")
    # The repository gets its remote: its id changes, and the operator aliases the old one.
    origin = git.Repo.init(tmp_path / "origin.git", bare=True, initial_branch="main")
    repo.create_remote("origin", str(origin.git_dir))
    repo.git.push("origin", "main:main", "refs/pull/7/head:refs/pull/7/head")
    new = _cli(capsys, repo)["subject"]["repo"]
    assert new != old
    assert run(capsys, "repo", "alias", old, new, "--reason", "got a remote").code == 0
    # The plan, recorded from the checkout, is under the new id.
    assert run(capsys, "plan", "record", "--branch", "main", "--repo", w, "--offline").code == 0
    index = _get(server, "/")
    assert [r["repo"] for r in index] == [new], index
    want = "not qualified: 1 of 2 required claims qualified"
    assert _cli(capsys, repo)["verdict"]["headline"] == want
    for asked in (new, old):
        for name, v in _surfaces(server, new).items():
            assert v["headline"] == want, (asked, name)
        api = _get(server, "/v1/status?" + urlencode({"repo": asked, "pr": 7}))
        assert api["verdict"]["headline"] == want and api["subject"]["repo"] == new
    # A checkout still named by the old id asks the server: answered under the new one.
    repo.delete_remote(repo.remote("origin"))
    asked = _cli(capsys, repo, "--server", server.url)
    assert asked["subject"]["repo"] == new and asked["verdict"]["headline"] == want
