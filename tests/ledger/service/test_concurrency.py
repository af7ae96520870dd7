"""A team deployment under load: `ledger serve` (a real process) with 8 runner
processes posting receipts concurrently and 2 readers polling status. Every
acknowledged receipt is in the ledger, the log is gapless, the audit clean."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from ledger.store.store import LOG, Store
from ledger.transparency.audit import audit
from tests.ledger.helpers import run

RUNNERS, PER_RUNNER, READERS = 8, 12, 2
ROOT = Path(__file__).resolve().parents[3]

RUNNER = """
import json, sys
from ledger.remote import client
from ledger.evidence.keys import KeyDir
from tests.ledger.factories import envelope
url, name = sys.argv[1], sys.argv[2]
key = KeyDir.default().load(name)
src = {"repo": "fleet", "commit": "1" * 40, "tree": "2" * 40, "dirty": False, "pr": 5}
acked = []
for i in range(int(sys.argv[3])):
    [d] = client.post_envelopes(url, [envelope(key, claim=f"{name}.c{i}", source=src)])
    acked.append(d["id"])
print(json.dumps(acked))
"""

READER = """
import json, sys, time, httpx
url, stop = sys.argv[1], sys.argv[2]
polls = errors = 0
import os
while not os.path.exists(stop):
    r = httpx.get(url + "/v1/status", params={"repo": "fleet", "pr": "5"}, timeout=30)
    polls += 1
    if r.status_code not in (200, 404):
        errors += 1
print(json.dumps({"polls": polls, "errors": errors}))
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_eight_runners_and_two_readers(
    db_url: str,
    key_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LEDGER_DB", db_url)
    assert run(capsys, "init").code == 0
    for i in range(RUNNERS):
        assert run(capsys, "keys", "new", f"host{i}", "--role", "runner").code == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LEDGER_KEYS": str(key_dir)}
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "ledger", "serve", "--port", str(port), "--db", db_url],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        stop = tmp_path / "stop"
        readers = [
            subprocess.Popen(
                [sys.executable, "-c", READER, url, str(stop)], env=env, stdout=subprocess.PIPE
            )
            for _ in range(READERS)
        ]
        runners = [
            subprocess.Popen(
                [sys.executable, "-c", RUNNER, url, f"host{i}", str(PER_RUNNER)],
                env=env,
                stdout=subprocess.PIPE,
            )
            for i in range(RUNNERS)
        ]
        acked: list[str] = []
        for p in runners:
            out, _ = p.communicate(timeout=300)
            assert p.returncode == 0
            acked.extend(json.loads(out))
        stop.touch()
        for p in readers:
            out, _ = p.communicate(timeout=60)
            doc = json.loads(out)
            assert doc["polls"] > 0 and doc["errors"] == 0, doc
    finally:
        server.terminate()
        server.wait(30)
    assert len(set(acked)) == RUNNERS * PER_RUNNER
    store = Store.open(db_url)
    try:
        assert all(store.entry(i) is not None for i in acked)
        with store.engine.connect() as conn:
            seqs = [r[0] for r in conn.execute(LOG.select().with_only_columns(LOG.c.seq))]
        assert sorted(seqs) == list(range(len(seqs)))  # gapless
        rep = audit(store)
        assert rep.ok, rep.problems
    finally:
        store.engine.dispose()
