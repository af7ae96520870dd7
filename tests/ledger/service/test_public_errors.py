"""Errors a client reads name no path of the server's (its artifact store, its
database): a tampered artifact is refused saying what failed, not where it lies."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import git
import httpx
import pytest

from ledger.evidence.keys import KeyDir
from ledger.service.run import start
from ledger.write.artifacts import for_ledger
from tests.ledger.helpers import run


def test_a_tampered_artifact_is_refused_without_the_servers_paths(
    repo: git.Repo,
    tmp_path: Path,
    db_url: str,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LEDGER_DB", db_url)
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    art = tmp_path / "report.txt"
    art.write_bytes(b"peak 9.1 GiB\n")
    r = run(
        capsys, "attest", "--unplanned", "--claim", "c", "--check", "x", "--rev", "HEAD",
        "--repo", str(repo.working_tree_dir), "--key", "runner", "--outcome", "passed",
        "--artifact", str(art),
    )  # fmt: skip
    assert r.code == 0, r.err
    digest = hashlib.sha256(art.read_bytes()).hexdigest()
    store = for_ledger(db_url)
    Path(store._path(digest)).write_bytes(b"tampered\n")
    srv = start(db_url, KeyDir(key_dir))
    try:
        res = httpx.get(f"{srv.url}/v1/artifacts/sha256:{digest}", timeout=30)
    finally:
        srv.stop()
    assert 400 <= res.status_code < 500, res.text
    reason = json.loads(res.text)["error"]
    assert "differs from its digest" in reason
    for secret in (store.location, str(tmp_path), "/tmp/"):
        assert secret not in reason, reason
