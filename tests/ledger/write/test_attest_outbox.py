"""`attest --server` with the server down signs the finished result and keeps it in
the outbox (`ledger push` delivers it later), instead of exiting before signing."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import git
import pytest

from ledger.evidence.keys import KeyDir
from ledger.service.run import start
from tests.ledger.helpers import run


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_attest_with_the_server_down_keeps_the_signed_statement(
    repo: git.Repo,
    key_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("LEDGER_SERVER_RETRIES", "0")  # no server there: nothing to wait for
    db = f"sqlite:///{tmp_path / 'l.db'}"
    assert run(capsys, "init", "--db", db).code == 0
    assert run(capsys, "keys", "new", "r", "--role", "runner", "--db", db).code == 0
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
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
        "--key",
        "r",
        "--server",
        url,
    )
    # The server was not reached: the infrastructure's, exit 3 (`ledger push` sends it).
    assert r.code == 3 and "kept in the outbox" in r.err, r.err
    rid = r.out.strip()
    assert rid.startswith("sha256:")
    srv = start(db, KeyDir(key_dir), port=port)
    try:
        pushed = run(capsys, "push", "--server", url, "--json")
        assert pushed.code == 0, pushed.err
        assert [d["id"] for d in json.loads(pushed.out)["recorded"]] == [rid]
    finally:
        srv.stop()
    assert json.loads(run(capsys, "show", rid, "--json", "--db", db).out)["id"] == rid
