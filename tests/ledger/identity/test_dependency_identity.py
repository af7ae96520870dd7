"""`[package]` lock files and distributions in the package identity, and status naming
the identity part that differed."""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest

from ledger.evidence.errors import InputError
from ledger.identity import environment_identity
from ledger.identity.source import package_identity
from ledger.qualification.plan import parse_plan
from tests.conftest import commit_file
from tests.ledger.helpers import run

PLAN = """
[package]
paths = ["model/**"]
lock = "uv.lock"
distributions = ["torch", "peft"]

[[claims]]
name = "adm"
check = "admission"
carry_over = "package"
cleanup = false
"""


def test_plan_takes_lock_files_and_distributions() -> None:
    spec = parse_plan(PLAN).package
    assert spec is not None
    assert spec.lock == ("uv.lock",) and spec.distributions == ("torch", "peft")
    with pytest.raises(InputError, match=r"package\.distributions: must be a string or an"):
        parse_plan(PLAN.replace('["torch", "peft"]', "3"))


def test_torch_is_identified_with_its_cuda_build() -> None:
    torch_id = environment_identity.distribution_version("torch")
    assert " cuda " in torch_id  # "2.13.0+cpu cuda none" here, "2.11.0+cu130 cuda 13.0" there
    assert environment_identity.distribution_version("no-such-dist") == "missing"


def test_lock_and_distributions_change_the_package_digest(
    repo: git.Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit_file(repo, "uv.lock", "torch==2.11.0\n", "lock")
    files_only = package_identity(repo.head.commit, ["model/**"])
    assert files_only.parts is None  # plans without lock/distributions: digest unchanged
    full = package_identity(
        repo.head.commit, ["model/**"], lock=["uv.lock"], distributions=["peft"]
    )
    assert full.parts is not None and full.parts["files"] == files_only.digest
    assert full.parts["lock:uv.lock"] == (repo.head.commit.tree / "uv.lock").hexsha
    commit_file(repo, "uv.lock", "torch==2.11.0+cu130\n", "relock")
    relocked = package_identity(repo.head.commit, ["model/**"], lock=["uv.lock"])
    before = package_identity(repo.head.commit.parents[0], ["model/**"], lock=["uv.lock"])
    assert relocked.digest != before.digest
    monkeypatch.setattr(environment_identity, "distribution_version", lambda n: "9.9")
    head = repo.head.commit
    upgraded = package_identity(head, ["model/**"], lock=["uv.lock"], distributions=["peft"])
    assert (
        upgraded.digest
        != package_identity(
            repo.head.commit, ["model/**"], lock=["uv.lock"], distributions=["torch"]
        ).digest
    )


def test_status_names_the_part_that_differed(
    repo: git.Repo,
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    commit_file(repo, "uv.lock", "peft==0.21\n", "lock")
    commit_file(repo, "qualification.toml", PLAN, "plan")
    where = ("--repo", str(repo.working_tree_dir))
    monkeypatch.setattr(environment_identity, "distribution_version", lambda n: f"{n}-1.0")
    r = run(capsys, "attest", "--claim", "adm", "--check", "admission", "--rev", "HEAD",
            *where, "--outcome", "passed", "--key", "runner")  # fmt: skip
    assert r.code == 0, r.err
    shown = json.loads(run(capsys, "show", r.out.strip(), "--json").out)
    parts = shown["statement"]["predicate"]["source"]["package"]["parts"]
    assert parts["dist:peft"] == "peft-1.0" and "lock:uv.lock" in parts
    commit_file(repo, "README.md", "docs only\n", "docs")  # same package files
    assert run(capsys, "status", "--rev", "HEAD", *where).code == 0  # carried by package
    monkeypatch.setattr(environment_identity, "distribution_version", lambda n: f"{n}-2.0")
    st = run(capsys, "status", "--rev", "HEAD", *where, "--json")
    assert st.code == 1
    text = json.dumps(json.loads(st.out))
    assert (
        "dist:peft: peft-1.0 -> peft-2.0" in text and "dist:torch: torch-1.0 -> torch-2.0" in text
    )
