"""A GitHub-check annotation points at the plan line of its claim (the claim's
`name = ...` in the governing `qualification.toml`), not at line 1."""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest

from tests.conftest import commit_file
from tests.ledger.helpers import run

PLAN = """\
# The claims this repository qualifies.

[[claims]]
name = "admission.no-oom-after-admit"
check = "admission"
scope = { device_kind = "cuda" }

[[claims]]
name = "determinism.bitwise"
check = "determinism"
scope = { device_kind = "cuda" }
"""


def test_each_annotation_is_on_its_claims_plan_line(
    repo: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    commit_file(repo, "qualification.toml", PLAN, "plan")
    db = ("--db", f"sqlite:///{tmp_path / 'l.db'}")
    assert run(capsys, "init", *db).code == 0
    q = ("status", "--repo", str(repo.working_tree_dir), "--rev", "HEAD", *db)
    out = run(capsys, *q, "--format", "github-check")
    notes = json.loads(out.out)["output"]["annotations"]
    lines = PLAN.splitlines()
    at = {n["title"].split(":")[0]: (n["path"], n["start_line"], n["end_line"]) for n in notes}
    assert at == {
        "admission.no-oom-after-admit": ("qualification.toml", 4, 4),
        "determinism.bitwise": ("qualification.toml", 9, 9),
    }
    assert lines[3] == 'name = "admission.no-oom-after-admit"'
    assert lines[8] == 'name = "determinism.bitwise"'
