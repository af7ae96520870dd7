"""One ledger key at a time: a second one is refused unless it is a rotation, so a
key whose private half this host lacks never takes over checkpoints and export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.ledger.helpers import run


def test_a_second_ledger_key_is_refused_unless_a_rotation(
    tmp_path: Path,
    db_url: str,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LEDGER_DB", db_url)
    assert run(capsys, "init").code == 0
    pem = tmp_path / "other.pem"
    pem.write_bytes(
        Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    before = json.loads(run(capsys, "audit", "--json").out)["entries"]
    r = run(capsys, "keys", "add", str(pem), "--name", "X", "--role", "ledger")
    assert r.code == 2 and r.err.count("\n") == 1 and "rotate-ledger" in r.err, r.err
    assert json.loads(run(capsys, "audit", "--json").out)["entries"] == before
    # The ledger still checkpoints with its own key; a rotation still replaces it.
    assert run(capsys, "log", "checkpoint").code == 0
    rot = run(capsys, "keys", "rotate-ledger")
    assert rot.code == 0, rot.err
    assert run(capsys, "log", "checkpoint").code == 0
