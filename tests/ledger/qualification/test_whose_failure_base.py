"""Whose failure, against the base the run names: a pull request on a defective
`release` branch, qualified with `--base release`, is set beside release's branch
point (never main's commit), and every surface says that its failure was already
there. Real claims on CPU, a real git repository, a real SQLite ledger."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import git
import httpx
import pytest

from ledger.evidence.keys import KeyDir
from ledger.service.run import start
from tests.ledger.helpers import run
from tests.ledger.probe_repo import claim, make_probe_repo

PR = 4


def _release_repo(path: Path) -> tuple[Path, str, str, str]:
    """main passes its claim; `release`, branched from it, fails it (its workload runs
    out of memory); PR 4 adds a notes file on release. Returns (repo, main's commit,
    release's branch point, the PR's head)."""
    make_probe_repo(path, claim("r"))
    repo = git.Repo(path)
    main = repo.head.commit.hexsha
    actor = git.Actor("Probe", "probe@ledger.invalid")
    repo.git.checkout("-b", "release")
    plan = path / "qualification.toml"
    plan.write_text(plan.read_text().replace('mode = "plain"', 'mode = "oom"'))
    repo.index.add(["qualification.toml"])
    point = repo.index.commit("release: defective", author=actor, committer=actor).hexsha
    (path / "notes.txt").write_text("the pull request's change\n")
    repo.index.add(["notes.txt"])
    head = repo.index.commit("notes", author=actor, committer=actor).hexsha
    repo.git.update_ref(f"refs/pull/{PR}/head", head)
    repo.git.reset("--hard", point)
    repo.git.checkout("main")
    return path, main, point, head


def _blocker(doc: dict[str, Any]) -> dict[str, Any]:
    [b] = doc["verdict"]["blockers"]
    return dict(b)


def test_the_label_names_the_branch_point_of_the_base_the_run_names(
    tmp_path: Path, ledger_env: Path, key_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, main, point, _ = _release_repo(tmp_path / "repo")
    r = run(capsys, "qualify", "--pr", str(PR), "--base", "release", "--repo", str(repo), "--json")
    assert r.code == 1, r.err
    doc = json.loads(r.out)
    [ran] = doc["baseline"]
    # The base is release's branch point, which fails too: main's commit (which passes)
    # is never the one the pull request is set beside.
    assert (ran["commit"], ran["outcome"]) == (point, "failed"), r.err
    a = _blocker(doc["status"])["attribution"]
    assert a["label"] == "base-too" and a["base_commit"] == point != main
    assert a["text"].endswith("; the base is the branch point on release"), a["text"]
    assert a["base_branch"] == "release"

    # `status`, asked later without --base, reads the base the receipts recorded.
    plain = run(capsys, "status", "--pr", str(PR), "--repo", str(repo), "--json")
    assert _blocker(json.loads(plain.out))["attribution"]["base_commit"] == point, plain.out
    st = run(capsys, "status", "--pr", str(PR), "--base", "release", "--repo", str(repo))
    flat = " ".join(st.out.split())
    assert "fails on the base too: not introduced here" in flat, st.out
    assert "introduced by this pull request:" not in flat
    # The head's receipt says it on its own page too: `ledger show` and the web.
    [head] = [x["id"] for x in doc["receipts"] if x["outcome"] == "failed"]
    shown = " ".join(run(capsys, "show", head).out.split())
    assert "baseline fails on the base too: not introduced here" in shown, shown
    assert "; the base is the branch point on release" in shown

    # Already on the base: the headline counts it apart, its next step is the base's,
    # and the GitHub check asks for a person's action instead of failing the change.
    assert st.out.splitlines()[1] == (
        "  blocking: 0 introduced by this pull request, 1 already on the base"
    )
    assert "next: fix it on release (the base" in flat
    check = run(
        capsys,
        "status",
        "--pr",
        str(PR),
        "--base",
        "release",
        "--repo",
        str(repo),
        "--format",
        "github-check",
    )
    assert json.loads(check.out)["conclusion"] == "action_required", check.out
    # The web PR page: the count under the headline, the label under the blocker.
    srv = start(f"sqlite:///{ledger_env / 'l.db'}", KeyDir(key_dir))
    try:
        q = {"repo": doc["status"]["subject"]["repo"], "pr": PR}
        page = httpx.get(f"{srv.url}/pr", params=q, headers={"Accept": "text/html"}).text
    finally:
        srv.stop()
    assert '<p class="whose" data-inherited-only="true">blocking: 0 introduced' in page
    assert '<div class="baseline" data-label="base-too">' in page
