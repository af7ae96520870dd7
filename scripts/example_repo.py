"""A self-contained example repository to qualify: the reference workload under git.

`make_example_repo` creates a real git repository holding a package ``model/``
(a verbatim copy of the reference MoE workload: ``model/workload.py`` exposing
``make_workload`` and ``model/estimator.py``, so both commits carry its admission
rule, including the CUDA allowance for memory outside the allocator's pool) and a
``qualification.toml`` with one claim per shipped check, sized to run in well under
a minute on a CPU.

History (author, committer and dates are fixed, so commit ids depend only on the
content):

- ``main``: one commit, the base.
- pull request 1: one commit on top of ``main`` that tightens the estimator's
  margin (``MARGIN_DIVISOR`` 8 -> 16), published as ``refs/pull/1/head`` (and as
  branch `PR_BRANCH`).

With ``with_remote`` a bare repository beside the checkout (``<name>-origin.git``)
is its ``origin``: it holds ``main``, `PR_BRANCH` and ``refs/pull/1/head``; the
checkout has ``main`` tracking ``origin/main`` and has never seen the pull
request's commit, so a client must fetch ``refs/pull/1/head`` to resolve it, as
with a fresh clone of a hosted repository. Without a remote the checkout holds
``refs/pull/1/head`` and `PR_BRANCH` itself.

Run ``python -m scripts.example_repo PATH [--no-remote]`` to make one and print
what was made.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import git

from scripts.example_plans import MULTI_RANK_PLAN, MULTI_RANK_PLAN_FILE

PR_NUMBER = 1
PR_REF = f"refs/pull/{PR_NUMBER}/head"
PR_BRANCH = "tighten-estimator-margin"
MAIN = "main"

AUTHOR = git.Actor("Ledger Example", "example@ledger.invalid")
BASE_DATE = dt.datetime(2026, 9, 20, 12, 0, tzinfo=dt.UTC)
PR_DATE = dt.datetime(2026, 9, 21, 12, 0, tzinfo=dt.UTC)

_WORKLOADS = Path(__file__).resolve().parents[1] / "runners" / "workloads"
_MARGIN_BASE = "MARGIN_DIVISOR = 8\n"
_MARGIN_PR = "MARGIN_DIVISOR = 16\n"

PLAN = """\
# Qualification plan for the example MoE workload. Parameters are small so the
# whole plan runs in well under a minute on a CPU.
workload = "model.workload:make_workload"   # default entry point for claims

[workload_params]
d_model = 64
n_layers = 2

[package]
paths = ["model/**/*.py"]

[[claims]]
name = "admission.no-oom-after-admit"
check = "admission"
params = { batches = [1, 2, 4], seqs = [16, 64], pressure = "edge" }
scope = { }
carry_over = "package"
reviews = 0
observer_off = false
cleanup = true

[[claims]]
name = "regression.24view-nograd"
check = "regression-24view"
params = { views = 24, seq = 32 }
scope = { }
carry_over = "package"
reviews = 0
observer_off = true
cleanup = true

[[claims]]
name = "backward.full-prefix"
check = "full-prefix-backward"
params = { batch = 4, seq = 64, prefix_backwards = 3 }
scope = { }
carry_over = "package"
reviews = 0
observer_off = false
cleanup = true

[[claims]]
name = "numerics.gradient-compare"
check = "gradient-compare"
params = { batch = 2, seq = 32, threshold = 0.03 }
scope = { }
carry_over = "commit"
reviews = 0
observer_off = false
cleanup = true

[[claims]]
name = "observer.off-control"
check = "observer-off-control"
params = { check = "regression-24view", params = { views = 24, seq = 32 } }
scope = { }
carry_over = "package"
reviews = 0
observer_off = false
cleanup = true

[[claims]]
name = "cleanup.all-released"
check = "cleanup"
params = { batch = 2, seq = 32 }
scope = { }
carry_over = "package"
reviews = 0
observer_off = false
cleanup = true
"""

README = """\
# Example MoE workload

A small mixture-of-experts transformer with LoRA experts (`model/`), qualified by
the plan in `qualification.toml`. Pull request 1 tightens the estimator margin.
"""


@dataclass(frozen=True, slots=True)
class ExampleRepo:
    """What `make_example_repo` made."""

    path: Path
    """The checkout (work tree on ``main``)."""
    origin: Path | None
    """The bare ``origin`` repository, or None without a remote."""
    base_commit: str
    """``main``'s commit: the pull request's base."""
    pr_head: str
    """The pull request's head commit (``refs/pull/1/head``)."""
    pr_number: int = PR_NUMBER
    pr_ref: str = PR_REF
    plan: str = "qualification.toml"
    """The plan's path inside the repository."""


def _files(multi_rank: bool = False) -> dict[str, str]:
    estimator = (_WORKLOADS / "estimator.py").read_text(encoding="utf-8")
    if estimator.count(_MARGIN_BASE) != 1:
        raise RuntimeError(f"estimator.py no longer defines {_MARGIN_BASE.strip()!r} once")
    files = {
        "README.md": README,
        "qualification.toml": PLAN,
        "model/__init__.py": '"""Example MoE workload package."""\n',
        "model/workload.py": (_WORKLOADS / "moe.py").read_text(encoding="utf-8"),
        "model/estimator.py": estimator,
    }
    if multi_rank:
        ep = (_WORKLOADS / "moe_ep.py").read_text(encoding="utf-8")
        files["model/workload_ep.py"] = ep.replace("from .moe import", "from .workload import")
        files[MULTI_RANK_PLAN_FILE] = MULTI_RANK_PLAN
    return files


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def _commit(repo: git.Repo, paths: Sequence[str], message: str, date: dt.datetime) -> str:
    repo.index.add(list(paths))
    commit = repo.index.commit(
        message,
        author=AUTHOR,
        committer=AUTHOR,
        author_date=date,
        commit_date=date,
        skip_hooks=True,
    )
    return str(commit.hexsha)


def _commit_pr(repo: git.Repo) -> str:
    """On a checkout of ``main``: branch `PR_BRANCH` and commit the pull request."""
    repo.git.checkout("-b", PR_BRANCH)
    est = Path(repo.working_tree_dir or ".") / "model" / "estimator.py"
    est.write_text(est.read_text(encoding="utf-8").replace(_MARGIN_BASE, _MARGIN_PR))
    return _commit(
        repo,
        ["model/estimator.py"],
        "Tighten the estimator margin to 1/16\n\nMeasured peaks stay below the walk alone.\n",
        PR_DATE,
    )


def make_example_repo(
    path: Path, *, with_remote: bool = True, multi_rank: bool = False
) -> ExampleRepo:
    """Create the example repository at ``path`` (which must not exist or be empty).

    With ``with_remote`` also creates the bare ``origin`` beside it (``path`` with
    ``-origin.git`` appended to its name), which alone holds ``refs/pull/1/head``.
    ``multi_rank`` adds the expert-parallel variant (``model/workload_ep.py``) and
    its plan, `MULTI_RANK_PLAN_FILE`.
    """
    path = Path(path)
    if path.exists() and any(path.iterdir()):
        raise FileExistsError(f"{path} exists and is not empty")
    path.mkdir(parents=True, exist_ok=True)
    repo = git.Repo.init(path, initial_branch=MAIN)
    files = _files(multi_rank)
    _write(path, files)
    base = _commit(repo, sorted(files), "Example MoE workload and qualification plan\n", BASE_DATE)

    if not with_remote:
        head = _commit_pr(repo)
        repo.git.update_ref(PR_REF, head)
        repo.git.checkout(MAIN)
        repo.close()
        return ExampleRepo(path=path, origin=None, base_commit=base, pr_head=head)

    origin_path = path.with_name(path.name + "-origin.git")
    if origin_path.exists():
        raise FileExistsError(f"{origin_path} exists")
    git.Repo.init(origin_path, bare=True, initial_branch=MAIN)
    origin = repo.create_remote("origin", str(origin_path))
    repo.git.push("origin", f"{MAIN}:{MAIN}")
    origin.fetch()
    repo.heads[MAIN].set_tracking_branch(origin.refs[MAIN])

    # The pull request is made in a throwaway clone so that the checkout never holds it.
    scratch = Path(tempfile.mkdtemp(prefix="example-pr-"))
    try:
        clone = git.Repo.clone_from(str(origin_path), scratch / "clone")
        head = _commit_pr(clone)
        clone.git.push("origin", f"{PR_BRANCH}:refs/heads/{PR_BRANCH}", f"{PR_BRANCH}:{PR_REF}")
        clone.close()
    finally:
        shutil.rmtree(scratch)
    repo.close()
    return ExampleRepo(path=path, origin=origin_path, base_commit=base, pr_head=head)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m scripts.example_repo PATH [--no-remote]``."""
    parser = argparse.ArgumentParser(
        prog="python -m scripts.example_repo",
        description="Create the example MoE repository to qualify (with a pull request).",
    )
    parser.add_argument("path", type=Path, help="where to create the checkout")
    parser.add_argument("--no-remote", action="store_true", help="keep the PR ref locally")
    parser.add_argument(
        "--multi-rank",
        action="store_true",
        help=f"add the expert-parallel variant and {MULTI_RANK_PLAN_FILE}",
    )
    args = parser.parse_args(argv)
    made = make_example_repo(args.path, with_remote=not args.no_remote, multi_rank=args.multi_rank)
    print(f"checkout     {made.path}")
    print(f"origin       {made.origin if made.origin else '(none)'}")
    print(f"base commit  {made.base_commit}  ({MAIN})")
    print(f"pr head      {made.pr_head}  ({made.pr_ref})")
    print(f"plan         {made.path / made.plan}")
    if made.origin:
        print(f"fetch it:    git -C {made.path} fetch origin {made.pr_ref}:{made.pr_ref}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
