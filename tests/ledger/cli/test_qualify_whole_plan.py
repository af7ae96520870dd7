"""`ledger qualify` exits by the whole plan's verdict, asked of the one judge `ledger
status` asks, with or without --server: a counterexample the head already holds on a
claim this run did not repeat keeps it red, whatever this run recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.evidence.keys import KeyDir
from ledger.service.run import start
from scripts.example_repo import make_example_repo
from tests.ledger.helpers import run


def test_a_head_that_failed_admission_stays_red_after_a_passing_subset(
    key_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db_url = f"sqlite:///{tmp_path / 'l.db'}"  # the store is not what this asks about
    monkeypatch.setenv("LEDGER_DB", db_url)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    repo = str(make_example_repo(tmp_path / "repo").path)
    failed = run(
        capsys,
        "attest",
        "--claim",
        "admission.no-oom-after-admit",
        "--check",
        "admission",
        "--outcome",
        "failed",
        "--reason",
        "OOM after admit at 37.2 GiB",
        "--pr",
        "1",
        "--repo",
        repo,
        "--key",
        "runner",
    )
    assert failed.code == 0, failed.err
    subset = ("qualify", "--pr", "1", "--repo", repo, "--claim", "cleanup.all-released")
    srv = start(db_url, KeyDir(key_dir))
    try:
        served = run(capsys, *subset, "--server", srv.url)
    finally:
        srv.stop()
    assert "cleanup.all-released  passed" in served.out, served.err
    # The server's verdict, as `status --server` gives it: the failure on the head blocks.
    assert served.code == 1, served.err
    assert "admission.no-oom-after-admit (failed)" in served.err
    assert "admission.no-oom-after-admit: failed" in served.out
    here = run(capsys, *subset)
    assert "cleanup.all-released  passed" in here.out, here.err
    assert here.code == 1, here.err
    assert "admission.no-oom-after-admit (failed)" in here.err
