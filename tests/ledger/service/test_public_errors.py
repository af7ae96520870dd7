"""The server's public error text redacts only whole server paths (its mirrors,
artifact folder, database), each with whatever path lies under it, and never
names one: a repository id that merely contains a mirror's path is left as the
client gave it, and the artifact folder is not named in any form (as configured,
relative, or resolved)."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from ledger.evidence.keys import KeyDir
from ledger.service.api import public_reason
from ledger.service.auth import Tokens, new_token
from ledger.service.run import start
from ledger.service.state import Ledger
from ledger.store.store import Store
from ledger.write.artifacts import ArtifactStore
from ledger.write.record import RemoteRecorder
from tests.ledger.factories import TREE, envelope
from tests.ledger.helpers import run


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


def test_the_index_names_no_server_path_in_a_pr_error(
    db: str, key_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A PR the index cannot judge shows its error as every public error: the
    receipt names its repository by a path that resolves, by the time the index
    reads it, into the server's mirror folder, so the lookup fails naming it."""
    assert run(capsys, "keys", "new", "runner", "--role", "runner", "--db", db).code == 0
    mirror = tmp_path / "m"
    mirror.mkdir()
    token = new_token("gpu-host", tmp_path / "tokens")
    keys = KeyDir(key_dir)
    srv = start(db, keys, tokens=tmp_path / "tokens", mirrors=[mirror])
    try:
        src = {"repo": f"file://{mirror}/link", "commit": "ab" * 20, "tree": TREE, "pr": 1}
        rec = envelope(keys.load("runner"), source={**src, "dirty": False})
        [got] = RemoteRecorder(srv.url, token).record([rec])
        assert got.seq is not None
        (mirror / "target").mkdir()
        (mirror / "link").symlink_to(mirror / "target")
        page = httpx.get(f"{srv.url}/", headers={"Accept": "text/html"})
    finally:
        srv.stop()
    assert page.status_code == 200
    [cell] = re.findall(r'<td data-label="verdict">(.*?)</td>', page.text, re.S)
    assert html.unescape(cell) == "no receipt for PR #1 of the server's storage"
