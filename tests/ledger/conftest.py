"""Fixtures the ledger's tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ledger.helpers import run


@pytest.fixture
def ledger_env(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Path:
    """A SQLite ledger with a runner key named ``runner``, in ``tmp_path``."""
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    monkeypatch.setenv("LEDGER_CACHE", str(tmp_path / "cache"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    return tmp_path
