"""`ledger status` / `history` end to end: real git, real store, PR heads moving."""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest

from tests.conftest import commit_file
from tests.ledger.helpers import run

PLAN = """
[package]
paths = ["model/**/*.py"]

[[claims]]
name = "admission.no-oom-after-admit"
check = "admission"
carry_over = "{carry}"
cleanup = false
"""


@pytest.fixture
def upstream(
    tmp_path: Path,
    db_url: str,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> git.Repo:
    monkeypatch.setenv("LEDGER_DB", db_url)
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "h200", "--role", "runner").code == 0
    assert run(capsys, "keys", "new", "alice", "--role", "reviewer").code == 0
    r = git.Repo.init(tmp_path / "up", initial_branch="main")
    commit_file(r, "model/planner.py", "budget = 1\n", "base")
    return r


def _plan(r: git.Repo, carry: str) -> None:
    commit_file(r, "qualification.toml", PLAN.format(carry=carry), "plan")


def _pr(r: git.Repo, n: int, sha: str) -> None:
    r.git.update_ref(f"refs/pull/{n}/head", sha)


def _attest(capsys: pytest.CaptureFixture[str], r: git.Repo, *args: str) -> str:
    res = run(
        capsys,
        "attest",
        "--unplanned",
        "--claim",
        "admission.no-oom-after-admit",
        "--check",
        "admission",
        "--repo",
        str(r.working_tree_dir),
        "--key",
        "h200",
        *args,
    )
    assert res.code == 0, res.err
    return res.out.strip()


def _status(capsys: pytest.CaptureFixture[str], r: git.Repo, *args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    res = run(capsys, "status", "--repo", str(r.working_tree_dir), "--json", *args)
    assert res.code in (0, 1), res.err
    return res.code, json.loads(res.out)


def _state(doc: dict) -> str:  # type: ignore[type-arg]
    [row] = [c for c in doc["claims"] if c["scope_role"] == "required"]
    return str(row["state"])


def test_force_push_makes_old_evidence_stale(
    upstream: git.Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    _plan(upstream, "commit")
    head1 = commit_file(upstream, "model/planner.py", "budget = 2\n", "pr v1")
    _pr(upstream, 898, head1)
    _attest(capsys, upstream, "--pr", "898", "--outcome", "passed")
    code, doc = _status(capsys, upstream, "--pr", "898")
    assert (code, _state(doc)) == (0, "qualified")
    # Force-push: the PR head moves to a commit with a different tree.
    upstream.git.reset("--hard", "HEAD~1")
    head2 = commit_file(upstream, "model/planner.py", "budget = 3\n", "pr v2")
    _pr(upstream, 898, head2)
    code, doc = _status(capsys, upstream, "--pr", "898")
    assert (code, _state(doc), doc["subject"]["commit"]) == (1, "stale", head2)
    assert any("stale" in r for r in doc["claims"][0]["reasons"])


def test_tree_identical_merge_keeps_qualification(
    upstream: git.Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    _plan(upstream, "tree")
    upstream.git.checkout("-b", "feature")
    head = commit_file(upstream, "model/planner.py", "budget = 2\n", "pr")
    _pr(upstream, 7, head)
    _attest(capsys, upstream, "--pr", "7", "--outcome", "passed")
    upstream.git.checkout("main")
    upstream.git.merge("--squash", "feature")
    actor = git.Actor("Merger", "m@example.com")
    merged = upstream.index.commit("squash #7", author=actor, committer=actor).hexsha
    assert merged != head and upstream.commit(merged).tree == upstream.commit(head).tree
    code, doc = _status(capsys, upstream, "--rev", merged)
    assert (code, _state(doc)) == (0, "qualified")
    assert doc["claims"][0]["via"] == "tree"


def test_package_identity_carries_only_when_package_is_identical(
    upstream: git.Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    _plan(upstream, "package")
    a = _attest(capsys, upstream, "--rev", "HEAD", "--outcome", "passed")
    commit_file(upstream, "README.md", "docs only\n", "docs")  # package untouched
    code, doc = _status(capsys, upstream, "--rev", "HEAD")
    assert (code, _state(doc), doc["claims"][0]["via"]) == (0, "qualified", "package")
    commit_file(upstream, "model/planner.py", "budget = 9\n", "planner change")
    code, doc = _status(capsys, upstream, "--rev", "HEAD")
    assert code == 1 and _state(doc) == "not-run"
    hist = json.loads(
        run(
            capsys, "history", "--rev", "HEAD~1", "--repo", str(upstream.working_tree_dir), "--json"
        ).out
    )
    assert [e["id"] for e in hist["entries"]] == [a]


def test_supersede_and_dispute(upstream: git.Repo, capsys: pytest.CaptureFixture[str]) -> None:
    _plan(upstream, "commit")
    bad = _attest(
        capsys,
        upstream,
        "--rev",
        "HEAD",
        "--outcome",
        "failed",
        "--reason",
        "CUDA OOM after admission at 106432 tokens",
    )
    other = _attest(capsys, upstream, "--rev", "HEAD", "--outcome", "passed")
    assert _state(_status(capsys, upstream, "--rev", "HEAD")[1]) == "failed"
    fix = _attest(
        capsys,
        upstream,
        "--rev",
        "HEAD",
        "--outcome",
        "passed",
        "--supersedes",
        bad[:19],
        "--supersedes-reason",
        "ballast leaked from a prior run",
    )
    code, doc = _status(capsys, upstream, "--rev", "HEAD")
    assert (code, _state(doc)) == (0, "qualified")
    hist = json.loads(
        run(
            capsys, "history", "--rev", "HEAD", "--repo", str(upstream.working_tree_dir), "--json"
        ).out
    )
    first = next(e for e in hist["entries"] if e["id"] == bad)
    assert first["superseded"] and first["superseded_by"][0]["id"] == fix
    for rid in (fix, other):
        assert (
            run(capsys, "review", rid, "--dispute", "--note", "wrong", "--key", "alice").code == 0
        )
    code, doc = _status(capsys, upstream, "--rev", "HEAD")
    assert (code, _state(doc)) == (1, "disputed")
    table = run(capsys, "status", "--repo", str(upstream.working_tree_dir), "--rev", "HEAD")
    assert table.code == 1 and "disputed" in table.out


def test_unknown_revision_and_bad_plan(
    upstream: git.Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    r = run(capsys, "status", "--repo", str(upstream.working_tree_dir), "--rev", "nope")
    assert r.code == 2 and "unknown revision" in r.err
    commit_file(upstream, "qualification.toml", "[[claims]]\nname = 1\n", "broken plan")
    r = run(capsys, "status", "--repo", str(upstream.working_tree_dir), "--rev", "HEAD")
    assert r.code == 2 and "qualification.toml" in r.err and r.err.count("\n") == 1
    r = run(capsys, "status", "--repo", str(upstream.working_tree_dir))
    assert r.code == 2 and "--rev or --pr" in r.err


def test_log_checkpoint_proof_consistency(
    upstream: git.Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _attest(capsys, upstream, "--rev", "HEAD", "--outcome", "passed")
    cp1 = run(capsys, "log", "checkpoint")
    assert cp1.code == 0 and cp1.out.splitlines()[1] == "4"
    _attest(capsys, upstream, "--rev", "HEAD", "--outcome", "inconclusive", "--reason", "other GPU")
    assert run(capsys, "log", "checkpoint").out.splitlines()[1] == "5"
    proof = json.loads(run(capsys, "log", "proof", a, "--json").out)
    assert proof["index"] == 3 and proof["size"] == 5 and len(proof["proof"]) >= 1
    cons = run(capsys, "log", "consistency", "4", "5", "--json")
    assert cons.code == 0 and json.loads(cons.out)["proof"]
    missing = run(capsys, "log", "consistency", "2", "5")
    assert missing.code == 1 and "no checkpoint at size 2" in missing.err
    assert run(capsys, "audit").code == 0


def test_a_contradicting_scope_answers_not_applicable(
    upstream: git.Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    """As docs/plan.md says: not an error, the claim is not-applicable, exit 1."""
    plan = PLAN.format(carry="commit") + 'scope = { gpu_model = "NVIDIA H200" }\n'
    commit_file(upstream, "qualification.toml", plan, "plan")
    code, doc = _status(capsys, upstream, "--rev", "HEAD", "--scope", "gpu_model=A100")
    assert code == 1 and _state(doc) == "not-applicable"
    assert "gpu_model=A100" in doc["claims"][0]["reasons"][0]


def test_history_and_show_for_people(
    upstream: git.Repo, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _plan(upstream, "commit")
    meas = tmp_path / "m.json"
    meas.write_text(
        json.dumps(
            {
                "measured_bytes": 149459365888,
                "ratio": 1.0000000000000002,
                "simulated": True,
                "shapes": [
                    {"shape": "4x2048", "predicted_bytes": 2516754432, "counterexample": False}
                ],
            }
        )
    )
    rid = _attest(
        capsys, upstream, "--rev", "HEAD", "--outcome", "passed", "--measurements", str(meas)
    )
    hist = run(capsys, "history", "--repo", str(upstream.working_tree_dir), "--rev", "HEAD")
    short = rid.removeprefix("sha256:")[:12]
    [line] = [x for x in hist.out.splitlines() if short in x]
    # A short id and the time it was recorded, never the 64-hex id.
    assert rid.removeprefix("sha256:") not in hist.out
    assert line.split()[2][:2] == "20" and ":" in line.split()[3]
    assert max(len(x) for x in hist.out.splitlines()) <= 80
    shown = run(capsys, "show", rid)
    assert shown.code == 0
    assert "measured_bytes = 139 GiB (149459365888)" in shown.out
    assert "ratio = 1" in shown.out and "1.0000000000000002" not in shown.out
    assert "simulated = yes" in shown.out and "True" not in shown.out
    assert "shapes (1 rows)" in shown.out and "2.34 GiB" in shown.out
    assert max(len(x) for x in shown.out.splitlines()) <= 80
    # --json is the statement as logged.
    doc = json.loads(run(capsys, "show", rid, "--json").out)
    assert doc["statement"]["predicate"]["measurements"]["ratio"] == 1.0000000000000002


def test_status_without_a_plan_is_refused_naming_plan(
    upstream: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _attest(capsys, upstream, "--rev", "HEAD", "--outcome", "passed")
    res = run(capsys, "status", "--repo", str(upstream.working_tree_dir), "--rev", "HEAD")
    # No plan committed and none given: no required claim exists, so no
    # "0 of 0 required claims qualified" answer.
    assert res.code == 2 and res.out == "" and res.err.count("\n") == 1
    assert "--plan" in res.err and "qualification.toml" in res.err
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.format(carry="commit"))
    code, doc = _status(capsys, upstream, "--rev", "HEAD", "--plan", str(plan))
    assert code == 0 and _state(doc) == "qualified"
    # Claims asked for by name still have an answer without a plan.
    _, doc = _status(capsys, upstream, "--rev", "HEAD", "--claim", "admission.no-oom-after-admit")
    assert [c["claim"] for c in doc["claims"]] == ["admission.no-oom-after-admit"]
