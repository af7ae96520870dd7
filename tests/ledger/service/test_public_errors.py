"""The server's public error text redacts only whole server paths (its mirrors,
artifact folder, database), each with whatever path lies under it, and never
names one: a repository id that merely contains a mirror's path is left as the
client gave it, and the artifact folder is not named in any form (as configured,
relative, or resolved)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from ledger.service.api import public_reason
from ledger.service.auth import Tokens
from ledger.service.run import start
from ledger.service.state import Ledger
from ledger.store.store import Store
from ledger.write.artifacts import ArtifactStore


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    cmd = [sys.executable, "-m", "ledger", "init", "--db", url]
    subprocess.run(cmd, check=True, capture_output=True)
    return url


def test_a_repository_id_containing_a_mirror_path_is_left_whole(db: str, tmp_path: Path) -> None:
    mirror = tmp_path / "m"
    mirror.mkdir()
    srv = start(db, None, mirrors=[mirror])
    try:
        fork = f"example.org{mirror}-fork"
        said = httpx.get(f"{srv.url}/v1/status", params={"repo": fork, "pr": "1"}).json()
        own = httpx.get(f"{srv.url}/v1/status", params={"repo": str(mirror), "pr": "1"}).json()
    finally:
        srv.stop()
    assert said["error"] == f"no receipt for PR #1 of {fork}"
    assert str(mirror) not in own["error"]


def test_the_artifact_folder_is_never_named(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = Store.open(db)
    try:
        led = Ledger(store, None, Tokens({}), ArtifactStore("arts"), mirrors=(Path("/srv/m"),))
        resolved = str(tmp_path / "arts")
        for reason in (
            "no artifact sha256:abc in arts",
            f"cannot read {resolved}/ab/abc: permission denied",
            "cannot read /srv/m/.git/objects/pack: gone",
        ):
            out = public_reason(led, reason)
            assert "arts" not in out.replace("artifact", ""), out
            assert resolved not in out and "/srv/m" not in out and ".git" not in out, out
        # Words that merely contain a path's text are left alone.
        assert public_reason(led, "no artifact sha256:abc") == "no artifact sha256:abc"
    finally:
        store.dispose()
