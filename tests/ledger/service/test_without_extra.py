"""The ledger core works without the `server` extra: its packages are only
imported by `ledger serve` and by --server, each saying what to install."""

from __future__ import annotations

import subprocess
import sys

BLOCK = """
import sys
BLOCKED = ("starlette", "uvicorn", "jinja2", "httpx", "fsspec")
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Block())
import ledger, ledger.cli, ledger.read.query, ledger.write.ingest, ledger.write.record
import ledger.remote.client, ledger.remote.outbox, ledger.write.artifacts
from ledger.cli import main
print("serve", main(["serve", "--db", "sqlite:////nonexistent/x.db"]))
print("show", main(["show", "ab" * 32, "--server", "http://127.0.0.1:9"]))
"""


def test_core_imports_and_fails_clearly_without_the_server_extra() -> None:
    p = subprocess.run([sys.executable, "-c", BLOCK], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "serve 2" in p.stdout and "show 2" in p.stdout
    assert "ledger serve needs the server extra" in p.stderr
    assert "--server needs httpx" in p.stderr
    assert "Traceback" not in p.stderr
