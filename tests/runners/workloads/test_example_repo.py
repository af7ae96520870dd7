"""The example repository: real git history, a valid plan, a loadable workload."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import git
import pytest
import torch

from ledger.qualification.plan import load_plan
from runners.protocol import Shape
from runners.workloads.loader import load_workload
from scripts.example_repo import PR_BRANCH, PR_REF, make_example_repo

ROOT = Path(__file__).resolve().parents[3]
CHECKS = {
    "admission",
    "regression-24view",
    "full-prefix-backward",
    "gradient-compare",
    "observer-off-control",
    "cleanup",
}


def test_with_remote_the_pull_request_must_be_fetched(tmp_path: Path) -> None:
    made = make_example_repo(tmp_path / "repo")
    assert made.origin == tmp_path / "repo-origin.git"
    repo = git.Repo(made.path)
    assert repo.active_branch.name == "main" and not repo.is_dirty(untracked_files=True)
    assert repo.head.commit.hexsha == made.base_commit
    assert repo.heads["main"].tracking_branch() is not None
    local_refs = {r.path for r in repo.refs}
    assert PR_REF not in local_refs and f"refs/heads/{PR_BRANCH}" not in local_refs
    with pytest.raises(git.GitCommandError):
        repo.git.cat_file("-e", made.pr_head)  # the object itself is absent, not just the ref

    origin = git.Repo(made.origin)
    assert origin.bare
    assert origin.commit(PR_REF).hexsha == made.pr_head
    assert origin.commit("main").hexsha == made.base_commit

    repo.git.fetch("origin", f"{PR_REF}:{PR_REF}")
    head = repo.commit(PR_REF)
    assert head.hexsha == made.pr_head
    assert [p.hexsha for p in head.parents] == [made.base_commit]
    assert sorted(str(d.a_path) for d in head.parents[0].diff(head)) == ["model/estimator.py"]
    assert head.author.email == head.committer.email == "example@ledger.invalid"


def test_commit_ids_are_reproducible_and_independent_of_the_remote(tmp_path: Path) -> None:
    a = make_example_repo(tmp_path / "a")
    b = make_example_repo(tmp_path / "b", with_remote=False)
    assert (a.base_commit, a.pr_head) == (b.base_commit, b.pr_head)
    assert b.origin is None
    local = git.Repo(b.path)
    assert local.commit(PR_REF).hexsha == b.pr_head
    assert local.active_branch.name == "main" and not local.remotes
    with pytest.raises(FileExistsError):
        make_example_repo(tmp_path / "a")


def test_plan_is_valid_and_covers_every_check(tmp_path: Path) -> None:
    made = make_example_repo(tmp_path / "repo", with_remote=False)
    plan = load_plan(made.path / made.plan)
    assert plan.workload == "model.workload:make_workload"
    assert {c.check for c in plan.claims} == CHECKS
    assert plan.package is not None and plan.package.paths == ("model/**/*.py",)
    control = next(c for c in plan.claims if c.check == "observer-off-control")
    controlled = next(c for c in plan.claims if c.observer_off)
    assert control.params["check"] == controlled.check
    assert control.params["params"] == controlled.params


def test_base_and_head_workloads_load_one_after_the_other(tmp_path: Path) -> None:
    made = make_example_repo(tmp_path / "repo", with_remote=False)
    plan = load_plan(made.path / made.plan)
    assert plan.workload is not None
    repo = git.Repo(made.path)
    head_tree = tmp_path / "head"
    repo.git.worktree("add", "--detach", str(head_tree), made.pr_head)

    shape = Shape(batch=2, seq=16)
    base = load_workload(made.path, plan.workload, plan.workload_params)
    assert type(base).__module__ == "model.workload"
    assert Path(sys.modules["model.workload"].__file__ or "").is_relative_to(made.path)
    base_predicted = base.estimate(shape, "forward_backward").predicted_bytes
    base.setup(torch.device("cpu"), 0)
    out = base.forward(base.make_batch(shape, 0), grad=False)
    assert out.pooled_hidden.shape == (2, 64)
    base.teardown()

    head = load_workload(head_tree, plan.workload, plan.workload_params)
    assert Path(sys.modules["model.estimator"].__file__ or "").is_relative_to(head_tree)
    # The pull request halves the margin: the same walk, a smaller prediction.
    assert head.estimate(shape, "forward_backward").predicted_bytes < base_predicted
    assert head.digest() != base.digest()
    # Both commits carry the CUDA allowance for memory outside the allocator's pool.
    for w in (base, head):
        assert vars(w)["config"].reserve_outside_pool_bytes == 512 << 20


def test_cli_prints_what_it_made(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "scripts.example_repo", str(tmp_path / "cli")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    made = git.Repo(tmp_path / "cli")
    assert made.head.commit.hexsha in proc.stdout
    assert "refs/pull/1/head" in proc.stdout and str(tmp_path / "cli-origin.git") in proc.stdout
