"""`verify ID --server URL` trusts only its anchor: the bundle is fetched and
verified here against --trust; without --trust the answer says it is the
server's word. A lying server (a real HTTP server in the test) never gets a
"verified" out of it."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.evidence.keys import load_public_pem, public_pem
from tests.ledger.helpers import run
from tests.ledger.transparency.test_bundle import Exported, exported, ledger

__all__ = ["exported"]

GHOST = "sha256:" + "ab" * 32
"""A receipt no ledger holds."""


class Liar:
    """Answers every GET from a table of path prefix -> (status, body)."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, bytes]] = {}
        liar = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                found = [a for p, a in liar.answers.items() if self.path.startswith(p)]
                status, body = found[0] if found else (404, b'{"error": "no"}')
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def liar() -> Iterator[Liar]:
    s = Liar()
    yield s
    s.stop()


def _anchor(exported: Exported, tmp_path: Path) -> Path:
    pub = tmp_path / "ledger.pub.pem"
    pub.write_bytes(public_pem(load_public_pem((exported.keys / "ledger.pem").read_bytes())))
    return pub


def test_a_lying_server_never_gets_verified_with_trust(
    exported: Exported,
    liar: Liar,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trust = _anchor(exported, tmp_path)
    real = exported.bundle.read_bytes()
    claimed = json.loads(
        ledger(capsys, "verify --json", str(exported.bundle), "--trust", str(trust)).out
    )
    # It claims any id verifies, and answers with the bundle of a real receipt.
    liar.answers["/v1/verify/"] = (200, json.dumps({**claimed, "id": GHOST}).encode())
    liar.answers["/v1/bundles/"] = (200, real)
    r = run(capsys, "verify", GHOST, "--server", liar.url, "--trust", str(trust))
    assert r.code == 1 and "verified" not in r.out, r.out
    assert "not of " + GHOST in r.err
    # A bundle of its own making: signed by a ledger key that is not the anchor.
    monkeypatch.setenv("LEDGER_KEYS", str(tmp_path / "liar-keys"))
    db = ("--db", f"sqlite:///{tmp_path / 'liar.db'}")
    ledger(capsys, "init", *db)
    ledger(capsys, "keys new runner --role runner", *db)
    attest = "attest --unplanned --claim admission.no-oom-after-admit --rev HEAD --outcome passed"
    rid = ledger(capsys, attest, "--repo", str(exported.repo), "--key", "runner", *db).out.strip()
    forged = tmp_path / "forged.json"
    ledger(capsys, "export", rid, "-o", str(forged), *db)
    liar.answers["/v1/bundles/"] = (200, forged.read_bytes())
    r = run(capsys, "verify", rid, "--server", liar.url, "--trust", str(trust))
    assert r.code == 1 and "verified" not in r.out, r.out
    # Garbage instead of a bundle: refused the same way, one line.
    liar.answers["/v1/bundles/"] = (200, b'{"verified": true}')
    r = run(capsys, "verify", GHOST, "--server", liar.url, "--trust", str(trust))
    assert r.code == 1 and "verified" not in r.out and r.err.count("\n") == 1, r.err


def test_an_honest_server_verifies_here_against_the_anchor(
    exported: Exported, liar: Liar, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trust = _anchor(exported, tmp_path)
    liar.answers["/v1/bundles/"] = (200, exported.bundle.read_bytes())
    r = run(capsys, "verify", exported.id, "--server", liar.url, "--trust", str(trust))
    assert r.code == 0, r.err
    assert r.out.startswith(f"verified {exported.id}") and "trust rests on" in r.out


def test_without_trust_the_answer_says_it_rests_on_the_servers_word(
    exported: Exported, liar: Liar, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trust = _anchor(exported, tmp_path)
    claimed = json.loads(
        ledger(capsys, "verify --json", str(exported.bundle), "--trust", str(trust)).out
    )
    liar.answers["/v1/verify/"] = (200, json.dumps({**claimed, "id": GHOST}).encode())
    r = run(capsys, "verify", GHOST, "--server", liar.url)
    assert not r.out.startswith("verified"), r.out
    assert "the server's word" in r.out and "the server's word" in r.err
    doc = json.loads(run(capsys, "verify", GHOST, "--server", liar.url, "--json").out)
    assert doc["trust"] == "server"
