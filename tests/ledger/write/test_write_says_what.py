"""`supersede` and `review` say what they recorded, after recording it: the new
id on standard output (for scripts) and, on standard error, what it did in the
past tense (a dry run in the conditional); a review names its verdict, the
receipt and the claim, not only an id."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from tests.ledger.helpers import run


def _failed(capsys: pytest.CaptureFixture[str], repo: git.Repo, db: tuple[str, str]) -> str:
    assert run(capsys, "init", *db).code == 0
    for name, role in (("host-a", "runner"), ("host-b", "runner"), ("rev", "reviewer")):
        assert run(capsys, "keys", "new", name, "--role", role, *db).code == 0
    failed = run(
        capsys,
        "attest",
        *("--claim", "admission.no-oom-after-admit", "--unplanned", "--rev", "HEAD"),
        *("--repo", str(repo.working_tree_dir), "--outcome", "failed", "--reason", "OOM"),
        *("--scope", "device_kind=cpu", "--key", "host-a", *db),
    )
    assert failed.code == 0, failed.err
    return failed.out.strip()


def test_supersede_says_what_it_did_once_it_has_recorded(
    repo: git.Repo, key_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ("--db", f"sqlite:///{tmp_path / 'l.db'}")
    fid = _failed(capsys, repo, db)
    dry = run(capsys, "supersede", fid, "--reason", "flaky", "--key", "host-b", "--dry-run", *db)
    assert dry.code == 0 and "nothing signed" in dry.err
    assert "it would:" in dry.err and "it will" not in dry.err
    done = run(capsys, "supersede", fid, "--reason", "flaky", "--key", "host-b", *db)
    assert done.code == 0, done.err
    new = done.out.strip()
    assert new.startswith("sha256:")
    assert "it will" not in done.err
    assert f"recorded {new}" in done.err and "it did not:" in done.err


def test_review_says_what_it_recorded(
    repo: git.Repo, key_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ("--db", f"sqlite:///{tmp_path / 'l.db'}")
    fid = _failed(capsys, repo, db)
    done = run(capsys, "review", fid, "--dispute", "--note", "wrong GPU", "--key", "rev", *db)
    assert done.code == 0, done.err
    rid = done.out.strip()
    assert rid.startswith("sha256:") and rid != fid
    said = " ".join(done.err.split())
    assert f"recorded review {rid}" in said
    assert f"dispute of receipt {fid[7:19]}" in said
    assert "admission.no-oom-after-admit" in said
