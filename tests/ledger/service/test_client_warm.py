"""The warm check's own path: one round trip, as believing the answer is (the server
sends its newest checkpoint and the entries since the last one seen with the answer; a
server of an earlier release sends none, and is checked as before), the copy of the log
kept open between a process's questions yet read afresh where the file was replaced,
and no database library loaded by the client that checks (real SQLite and PostgreSQL
behind the server)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import git
import httpx
import pytest

import ledger.remote.client as client
from ledger.service.run import Running
from tests.ledger.helpers import run
from tests.ledger.service.test_client_checks import _attest, _status, served

__all__ = ["served"]


def _asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths the client asks the server for, in order."""
    paths: list[str] = []
    send = client._request

    def recorded(url: str, path: str, **kwargs: Any) -> tuple[int, bytes, str]:
        paths.append(path)
        return send(url, path, **kwargs)

    monkeypatch.setattr(client, "_request", recorded)
    return paths


def _grow(capsys: pytest.CaptureFixture[str], r: git.Repo) -> None:
    _attest(capsys, r, "admission.no-oom-after-admit", "passed")
    assert run(capsys, "log", "checkpoint").code == 0


def test_a_warm_check_is_one_round_trip(
    served: tuple[Running, git.Repo, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    srv, r, pem = served
    assert _status(capsys, srv, r, pem, "--json").code == 1  # the failed claim: synced
    _grow(capsys, r)
    paths = _asked(monkeypatch)
    warm = _status(capsys, srv, r, pem, "--json")
    assert warm.code == 1, warm.err
    assert json.loads(warm.out)["checked"]["fetched"] == 1
    assert len(paths) == 1 and paths[0].startswith("/v1/status?since="), paths
    assert "log" not in json.loads(warm.out)  # the log it came with is not the answer


def test_a_server_sending_no_log_with_its_answer_is_checked_as_before(
    served: tuple[Running, git.Repo, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An earlier release ignores `since`: the checkpoint is asked apart and the entries
    up to it fetched; a tree that holds still decides."""
    srv, r, pem = served
    assert _status(capsys, srv, r, pem).code == 1
    _grow(capsys, r)
    # Logged past the checkpoint (an entry no answer rests on): served, not synced.
    assert run(capsys, "keys", "new", "late", "--role", "reviewer").code == 0

    answer = client.fetch_status

    def earlier(url: str, question: Any, timeout: float = 60, since: int | None = None) -> Any:
        return answer(url, question, timeout)

    monkeypatch.setattr(client, "fetch_status", earlier)
    paths = _asked(monkeypatch)
    warm = _status(capsys, srv, r, pem, "--json")
    assert warm.code == 1, warm.err
    assert json.loads(warm.out)["checked"]["fetched"] == 1
    assert "/v1/checkpoint" in paths and "log" not in json.loads(warm.out)


def test_the_entries_route_serves_its_checkpoint_and_stops_at_it(
    served: tuple[Running, git.Repo, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    srv, r, _ = served
    _attest(capsys, r, "admission.no-oom-after-admit", "passed")  # logged, not checkpointed
    note = httpx.get(f"{srv.url}/v1/checkpoint", timeout=30).text
    size = int(note.splitlines()[1])
    doc = httpx.get(f"{srv.url}/v1/log/entries?from=1&checkpoint=1", timeout=30).json()
    assert doc["checkpoint"] == note
    assert [e["seq"] for e in doc["entries"]] == list(range(1, size))
    assert doc["size"] == size + 1
    plain = httpx.get(f"{srv.url}/v1/log/entries?from=1", timeout=30).json()
    assert "checkpoint" not in plain and len(plain["entries"]) == size


def test_a_copy_removed_between_questions_is_fetched_afresh(
    served: tuple[Running, git.Repo, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The copy a process keeps open is not read once its file is gone: the next
    question fetches the log again and checks it."""
    srv, r, pem = served
    first = json.loads(_status(capsys, srv, r, pem, "--json").out)["checked"]
    shutil.rmtree(tmp_path / "cache")
    again = json.loads(_status(capsys, srv, r, pem, "--json").out)["checked"]
    assert again["fetched"] == first["fetched"] == first["checkpoint"]["size"] > 0
    assert list((tmp_path / "cache" / "logs").iterdir())


def test_the_client_that_checks_loads_no_database_library() -> None:
    """Its own cost is its imports too: the store (SQLAlchemy, the PostgreSQL dialect)
    is the server's, not the checking client's."""
    code = (
        "import sys, ledger.read.checked\n"
        "held = sorted(m for m in ('sqlalchemy', 'sqlmodel', 'ledger.store.store')"
        " if m in sys.modules)\n"
        "print(' '.join(held))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", out.stdout
