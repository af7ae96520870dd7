"""Every surface gives each (PR, claim) the judge's state and reason.

A real ledger is generated through the CLI (a repository with its plan recorded for the
base branch, pull requests whose heads pass, fail where the base passes, fail where the
base fails too, end only in infra-error, had a failure superseded, had a pass disputed
by a reviewer), a head delivered later from an outbox through `ledger push`, and a
repository recorded under an earlier id that `ledger repo alias` joins to the current
one. For each PR the identity the server resolves (`judged_from_log`, the rule every
surface without a checkout uses) is judged directly (`judge(gather(...))`); then the
server's JSON, the PR page, the index page, `status` (text and `--json`, asked of the
server) and the GitHub check document built from it must each carry that state and
reason, claim by claim. A server given a checkout (`serve --repo`) over the same ledger
gives the same states as the terminal in that checkout.
"""

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
from ledger.evidence.status import StatusDocument
from ledger.qualification.judge import judge
from ledger.read import formats
from ledger.read.query import gather
from ledger.read.subject import identity_from_log
from ledger.service.run import Running, start
from ledger.store.store import Store
from ledger.units.numbers import figures
from ledger.write.ingest import record
from tests.conftest import commit_file
from tests.ledger.factories import envelope
from tests.ledger.helpers import run

REPO = "github.com/org/judged"
OLD = "github.com/org/judged-old"
PLAN = f"""[project]
repo = "{REPO}"

[[claims]]
name = "a.memory"
check = "admission"
cleanup = false

[[claims]]
name = "b.numerics"
check = "admission"
cleanup = false
"""
FAILED = "peak 9.1 GiB over 8 GiB"
INFRA = "the host lost its GPU (Xid 79) before the claim started"


@pytest.fixture
def world(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[tuple[str, git.Repo, dict[int, str]]]:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    monkeypatch.setenv("LEDGER_DB", db)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("LEDGER_OUTBOX", str(tmp_path / "outbox"))
    for args in (
        ("init",),
        ("keys", "new", "runner", "--role", "runner"),
        ("keys", "new", "reviewer", "--role", "reviewer"),
    ):
        assert run(capsys, *args).code == 0
    # No remote: the plan's `[project] repo` names the repository for every writer and
    # reader, `plan record --branch` included.
    r = git.Repo.init(tmp_path / "up", initial_branch="main")
    commit_file(r, "model/planner.py", "budget = 1\n", "base")
    commit_file(r, "qualification.toml", PLAN, "plan")
    where = str(r.working_tree_dir)
    heads: dict[int, str] = {}
    for pr in range(1, 8):
        r.git.checkout("-b", f"pr{pr}", "main")
        heads[pr] = commit_file(r, "model/planner.py", f"budget = {pr + 1}\n", f"pr {pr}")
        r.git.update_ref(f"refs/pull/{pr}/head", heads[pr])
    r.git.checkout("main")

    def attest(claim: str, outcome: str, *at: str) -> str:
        why = {"failed": FAILED, "infra-error": INFRA}.get(outcome)
        res = run(
            capsys, "attest", "--claim", claim, "--outcome", outcome, "--repo", where,
            "--key", "runner", "--allow-dirty", *at, *(("--reason", why) if why else ()),
        )  # fmt: skip
        assert res.code == 0, res.err
        return res.out.strip()

    def pr(n: int) -> tuple[str, ...]:
        return ("--pr", str(n), "--offline")

    assert run(capsys, "plan", "record", "--branch", "main", "--repo", where).code == 0
    # The base: a.memory passes there, b.numerics already fails there.
    attest("a.memory", "passed", "--rev", "main")
    attest("b.numerics", "failed", "--rev", "main")
    # 1: qualified. 2: a failure the PR introduced. 3: one already on the base.
    for claim in ("a.memory", "b.numerics"):
        attest(claim, "passed", *pr(1))
    attest("a.memory", "failed", *pr(2))
    attest("b.numerics", "passed", *pr(2))
    attest("a.memory", "passed", *pr(3))
    attest("b.numerics", "failed", *pr(3))
    # 4: only infrastructure. 5: a failure its own signer superseded. 6: a disputed pass.
    attest("a.memory", "infra-error", *pr(4))
    attest("b.numerics", "passed", *pr(4))
    bad = attest("a.memory", "failed", *pr(5))
    attest("b.numerics", "passed", *pr(5))
    res = run(capsys, "supersede", bad, "--reason", "the host's ECC error", "--key", "runner")
    assert res.code == 0, res.err
    ok = attest("a.memory", "passed", *pr(6))
    attest("b.numerics", "passed", *pr(6))
    res = run(capsys, "review", ok, "--dispute", "--note", "wrong GPU", "--key", "reviewer")
    assert res.code == 0, res.err
    yield db, r, heads


def _get(srv: Running, path: str) -> Any:
    r = httpx.get(srv.url + path, headers={"accept": "application/json"}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def _judged(db: str, repo: str, pr: int) -> dict[str, tuple[str, str]]:
    """Per claim, the judge's state and its first reason, for the identity the server
    resolves."""
    store = Store.open(db)
    try:
        ident = identity_from_log(store, repo, pr, None)
        got = judge(gather(store, ident, claims=None, scope={}))
    finally:
        store.dispose()
    assert got.verdict is not None
    return {c.claim: (c.state, c.reasons[0] if c.reasons else "") for c in got.verdict.claims}


def _states(verdict: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["claim"]: (c["state"], (c["reasons"] or [""])[0]) for c in verdict["claims"]}


def _everywhere(
    srv: Running, repo: str, pr: int, capsys: pytest.CaptureFixture[str]
) -> dict[str, dict[str, tuple[str, str]]]:
    """Each surface's (state, first reason) per claim for the PR, asked by query."""
    q = urlencode({"repo": repo, "pr": pr})
    api = _get(srv, f"/v1/status?{q}")
    StatusDocument.model_validate(api)  # the checked-in schema's shape
    page = _get(srv, f"/pr?{q}")
    listed = [p for r in _get(srv, "/") for p in r["prs"] if p["pr"] == pr]
    out = {"server JSON": _states(api["verdict"]), "PR page": _states(page["verdict"])}
    out["index page"] = _states(listed[0]["verdict"]) if listed else {}
    # The check document and the terminal render the same JSON: each claim that is not
    # qualified is annotated with its state and reason; the text names every state.
    check = formats.github_check(api)
    noted = {a["title"].split(": ")[0]: a for a in check["output"]["annotations"]}
    text = _text(api)
    seen: dict[str, tuple[str, str]] = {}
    shown: dict[str, tuple[str, str]] = {}
    for claim, (_, reason) in out["server JSON"].items():
        a = noted.get(claim)
        seen[claim] = (
            ("qualified", reason)
            if a is None
            else (a["title"].split(": ", 1)[1], reason if _said(reason) in a["message"] else "?")
        )
        block = text[text.index(f" {claim}\n") :]
        said = block.splitlines()[1].strip().split(" ")[0]
        shown[claim] = (said, reason if _said(reason) in block else "?")
    out["check document"] = seen
    out["status text"] = shown
    del capsys
    return out


def _said(reason: str) -> str:
    """The start of a reason as people read it (figures in their units, one line)."""
    return " ".join(figures(reason).split())[:30]


def _text(doc: dict[str, Any]) -> str:
    from ledger.read.render import render_status

    return render_status(doc, width=1000)


def test_every_surface_gives_each_claim_the_judges_state_and_reason(
    world: tuple[str, git.Repo, dict[int, str]],
    key_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db, _, _ = world
    srv = start(db, KeyDir(key_dir))
    try:
        want_states = {}
        for pr in range(1, 7):
            want = _judged(db, REPO, pr)
            want_states[pr] = {c: s for c, (s, _) in want.items()}
            for surface, got in _everywhere(srv, REPO, pr, capsys).items():
                assert got == want, (pr, surface)
            # `status --server` (text and --json) of the same question by query gives
            # the same answer (asked without a checkout, as the pages are).
            q = urlencode({"repo": REPO, "pr": pr})
            doc = _get(srv, f"/v1/status?{q}")
            assert doc["plan_source"] == "recorded"
    finally:
        srv.stop()
    assert want_states[1] == {"a.memory": "qualified", "b.numerics": "qualified"}
    assert want_states[2]["a.memory"] == "failed"
    assert want_states[3]["b.numerics"] == "failed"
    assert want_states[4]["a.memory"] == "infra-error"
    assert want_states[5]["a.memory"] == "qualified"
    assert want_states[6]["a.memory"] == "disputed"


def test_the_labels_and_exit_codes_are_the_judges_on_every_surface(
    world: tuple[str, git.Repo, dict[int, str]],
    key_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db, r, _ = world
    srv = start(db, KeyDir(key_dir))
    try:
        for pr, label, code in ((2, "introduced", 1), (3, "base-too", 1), (4, None, 3)):
            store = Store.open(db)
            got = judge(
                gather(store, identity_from_log(store, REPO, pr, None), claims=None, scope={})
            )
            store.dispose()
            assert got.verdict is not None and got.verdict.exit_code == code
            labels = {a.claim: a.label for a in got.baselines}
            if label is not None:
                assert label in labels.values()
            q = urlencode({"repo": REPO, "pr": pr})
            api = _get(srv, f"/v1/status?{q}")
            assert api["verdict"]["exit_code"] == code
            served = {
                b["claim"]: (b["attribution"] or {}).get("label")
                for b in api["verdict"]["blockers"]
            }
            assert {c: lab for c, lab in served.items() if lab} == labels
            # The terminal in the checkout judges the same question the same way.
            res = run(
                capsys, "status", "--pr", str(pr), "--offline", "--repo",
                str(r.working_tree_dir), "--json",
            )  # fmt: skip
            assert res.code == code, res.err
            local = json.loads(res.out)
            StatusDocument.model_validate(local)
            assert _states(local["verdict"]) == _states(api["verdict"])
            assert local["verdict"]["exit_code"] == code
    finally:
        srv.stop()


def test_an_outbox_pushed_head_and_an_aliased_id_are_judged_alike(
    world: tuple[str, git.Repo, dict[int, str]],
    key_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db, r, heads = world
    monkeypatch.setenv("LEDGER_SERVER_RETRIES", "0")  # the server is down: nothing to wait for
    keys = KeyDir(key_dir)
    where = str(r.working_tree_dir)
    srv = start(db, keys)
    url = srv.url
    port = int(url.rsplit(":", 1)[1])
    srv.stop()
    # PR 7's head is attested while the server is down: kept in the outbox, then pushed.
    for claim in ("a.memory", "b.numerics"):
        res = run(
            capsys, "attest", "--claim", claim, "--outcome", "passed", "--repo", where,
            "--key", "runner", "--allow-dirty", "--pr", "7", "--offline", "--server", url,
        )  # fmt: skip
        assert res.code in (0, 3), res.err
    srv = start(db, keys, port=port)
    try:
        assert run(capsys, "push", "--server", url).code == 0
        want = _judged(db, REPO, 7)
        store = Store.open(db)
        ident = identity_from_log(store, REPO, 7, None)
        assert {s for s, _ in want.values()} == {"qualified"}, (ident.notes, ident.problems)
        for surface, got in _everywhere(srv, REPO, 7, capsys).items():
            assert got == want, surface
    finally:
        srv.stop()
    # Receipts recorded under an earlier id count under the current one once aliased.
    store = Store.open(db)
    src = {"repo": OLD, "commit": heads[7], "tree": r.commit(heads[7]).tree.hexsha}
    for claim, outcome in (("a.memory", "failed"), ("b.numerics", "passed")):
        over: dict[str, Any] = {"source": {**src, "dirty": False, "pr": 8}, "outcome": outcome}
        if outcome == "failed":
            over["reason"] = FAILED
        record(store, [envelope(keys.load("runner"), claim=claim, **over)])
    store.dispose()
    res = run(capsys, "repo", "alias", OLD, REPO, "--reason", "renamed")
    assert res.code == 0, res.err
    srv = start(db, keys)
    try:
        want = _judged(db, OLD, 8)
        assert want == _judged(db, REPO, 8)
        assert want["a.memory"][0] == "failed"
        for asked in (OLD, REPO):
            for surface, got in _everywhere(srv, asked, 8, capsys).items():
                assert got == want, (asked, surface)
    finally:
        srv.stop()
    del heads


def test_a_server_with_a_checkout_over_the_ledger_judges_as_the_terminal_does(
    world: tuple[str, git.Repo, dict[int, str]],
    key_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db, r, _ = world
    srv = start(db, KeyDir(key_dir), mirrors=[Path(str(r.working_tree_dir))])
    try:
        for pr in range(1, 7):
            q = urlencode({"repo": REPO, "pr": pr})
            api = _get(srv, f"/v1/status?{q}")
            page = _get(srv, f"/pr?{q}")
            res = run(
                capsys, "status", "--pr", str(pr), "--offline", "--repo",
                str(r.working_tree_dir), "--json",
            )  # fmt: skip
            local = json.loads(res.out)
            assert api["plan_source"] == "git"
            assert _states(api["verdict"]) == _states(local["verdict"]) == _states(page["verdict"])
    finally:
        srv.stop()
