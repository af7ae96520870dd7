"""A ledger with a claim's trend to show (the trend page's tests): two base commits
with admission receipts on an H200, and PR 4 whose first head failed on the H200
(a receipt later superseded), whose second head passed there and failed on an A10,
where the base has no receipt, and where the plan requires it (so the claim blocks
the PR); a second claim the base never measured."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import git
import pytest

from tests.conftest import commit_file
from tests.ledger.helpers import run

ADMISSION = "admission.no-oom-after-admit"
PEAK = "cleanup.peak"
PLAN = f"""
[[claims]]
name = "{ADMISSION}"
check = "admission"
cleanup = false
scope = {{ device_kind = "cuda", gpu_model = "A10" }}

[[claims]]
name = "{PEAK}"
check = "cleanup"
cleanup = false
"""


@dataclass
class Site:
    repo: git.Repo
    base: list[str]
    """The base commits, oldest first."""
    heads: list[str]
    ids: dict[str, str]


def _attest(
    capsys: pytest.CaptureFixture[str],
    r: git.Repo,
    tmp: Path,
    claim: str,
    measurements: dict[str, object],
    *args: str,
) -> str:
    m = tmp / f"m{len(list(tmp.glob('m*.json')))}.json"
    m.write_text(json.dumps(measurements))
    res = run(
        capsys,
        "attest",
        "--repo",
        str(r.working_tree_dir),
        "--key",
        "h200",
        "--offline",
        "--claim",
        claim,
        "--measurements",
        str(m),
        *args,
    )
    assert res.code == 0, res.err
    return res.out.strip()


def _ratio(worst: float, least: float) -> dict[str, object]:
    return {"max_measured_over_predicted": worst, "min_measured_over_predicted": least}


def _on(gpu: str) -> tuple[str, ...]:
    return ("--scope", "device_kind=cuda", "--scope", f"gpu_model={gpu}")


PASSED = ("--outcome", "passed")
FAILED = ("--outcome", "failed", "--reason", "measured > predicted")


def build(tmp: Path, capsys: pytest.CaptureFixture[str]) -> Site:
    for args in (("init",), ("keys", "new", "h200", "--role", "runner")):
        assert run(capsys, *args).code == 0
    r = git.Repo.init(tmp / "up", initial_branch="main")
    commit_file(r, "qualification.toml", PLAN, "plan")
    ids: dict[str, str] = {}
    b1 = commit_file(r, "model.py", "x = 1\n", "base 1")
    ids["b1"] = _attest(
        capsys, r, tmp, ADMISSION, _ratio(0.8, 0.81), "--rev", b1, *PASSED, *_on("H200")
    )
    b2 = commit_file(r, "model.py", "x = 2\n", "base 2")
    ids["b2"] = _attest(
        capsys, r, tmp, ADMISSION, _ratio(0.9, 0.81), "--rev", b2, *PASSED, *_on("H200")
    )
    r.git.checkout("-b", "feature")
    h1 = commit_file(r, "model.py", "x = 3\n", "pr head 1")
    r.git.update_ref("refs/pull/4/head", h1)
    ids["h1"] = _attest(
        capsys, r, tmp, ADMISSION, _ratio(1.28, 0.9), "--pr", "4", *FAILED, *_on("H200")
    )
    sup = run(capsys, "supersede", ids["h1"], "--reason", "a noisy neighbour", "--key", "h200")
    assert sup.code == 0, sup.err
    ids["sup"] = sup.out.strip()
    h2 = commit_file(r, "model.py", "x = 4\n", "pr head 2")
    r.git.update_ref("refs/pull/4/head", h2)
    ids["h2"] = _attest(
        capsys, r, tmp, ADMISSION, _ratio(0.99, 0.000837), "--pr", "4", *PASSED, *_on("H200")
    )
    ids["a10"] = _attest(
        capsys, r, tmp, ADMISSION, _ratio(1.5, 1.1), "--pr", "4", *FAILED, *_on("A10")
    )
    ids["peak"] = _attest(
        capsys, r, tmp, PEAK, {"process_peak_bytes": 3 << 30}, "--pr", "4", *PASSED
    )
    r.git.checkout("main")
    return Site(r, [b1, b2], [h1, h2], ids)
