"""`export -o F` and `artifact get -o F` write through an exclusive temporary file:
a planted `F.part` symlink (or file) is never written through."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.cli.files import write_atomically
from tests.ledger.helpers import run
from tests.ledger.transparency.test_bundle import Exported, exported

__all__ = ["exported"]


def test_export_never_writes_through_a_planted_part_link(
    exported: Exported, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "bundle.json"
    out.with_name("bundle.json.part").symlink_to(victim)
    r = run(capsys, "export", exported.id, "-o", str(out), "--db", exported.db)
    assert r.code == 0, r.err
    assert victim.read_text() == "precious\n"
    assert out.read_bytes().startswith(b"{") and not out.is_symlink()


def test_artifact_get_never_writes_through_a_planted_part_link(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import git

    from tests.conftest import commit_file

    monkeypatch.setenv("LEDGER_ARTIFACTS", str(tmp_path / "artifacts"))
    repo = git.Repo.init(tmp_path / "repo", initial_branch="main")
    commit_file(repo, "x.py", "a = 1\n", "first")
    db = ("--db", f"sqlite:///{tmp_path / 'l.db'}")
    assert run(capsys, "init", *db).code == 0
    assert run(capsys, "keys", "new", "r", "--role", "runner", *db).code == 0
    art = tmp_path / "log.txt"
    art.write_text("the log\n")
    r = run(
        capsys,
        "attest",
        "--unplanned",
        "--claim",
        "c",
        "--rev",
        "HEAD",
        "--repo",
        str(repo.working_tree_dir),
        "--outcome",
        "passed",
        "--artifact",
        str(art),
        "--key",
        "r",
        *db,
    )
    assert r.code == 0, r.err
    import hashlib

    digest = hashlib.sha256(b"the log\n").hexdigest()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "got.txt"
    out.with_name("got.txt.part").symlink_to(victim)
    r = run(capsys, "artifact", "get", digest, "-o", str(out), *db)
    assert r.code == 0, r.err
    assert victim.read_text() == "precious\n" and out.read_text() == "the log\n"


def test_write_atomically_refuses_nothing_it_should_write(tmp_path: Path) -> None:
    target = tmp_path / "t"
    write_atomically(target, b"one")
    write_atomically(target, b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["t"]  # no temporary left behind
