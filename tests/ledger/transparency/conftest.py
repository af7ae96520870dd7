"""A ledger with receipts, and witnesses listening on loopback (real HTTP, real SQLite)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ledger.evidence.keys import KeyDir
from ledger.service.witness_http import WitnessServer
from ledger.store.store import Store, resolve_url
from ledger.transparency.witness import Witness, parse_logs
from tests.ledger.factories import envelope
from tests.ledger.helpers import Run, run


def ok(r: Run) -> Run:
    assert r.code == 0, f"exit {r.code}: {r.err}"
    return r


@dataclass
class Ledger:
    db: str
    keys: Path
    tmp: Path
    capsys: pytest.CaptureFixture[str]
    count: int = 0

    def __call__(self, *args: str) -> Run:
        return run(self.capsys, *args, "--db", self.db)

    def store(self) -> Store:
        return Store.open(resolve_url(self.db))

    def record(self, n: int = 1) -> list[str]:
        """Record `n` receipts signed by the runner key; their ids."""
        runner = KeyDir(self.keys).load("runner")
        ids = []
        for _ in range(n):
            self.count += 1
            f = self.tmp / f"env-{Path(self.db).stem}-{self.count}.json"
            f.write_bytes(envelope(runner, claim=f"claim.{self.count}"))
            ids.append(ok(self("record", str(f))).out.split()[0])
        return ids


@pytest.fixture
def ledger(tmp_path: Path, key_dir: Path, capsys: pytest.CaptureFixture[str]) -> Ledger:
    db = str(tmp_path / "ledger.db")
    lg = Ledger(db, key_dir, tmp_path, capsys)
    ok(lg("init"))
    ok(lg("keys", "new", "runner", "--role", "runner"))
    return lg


@dataclass
class Witnesses:
    """Two witnesses of one ledger, each with its state file, served on loopback."""

    tmp: Path
    logs: bytes
    names: tuple[str, ...] = ("w1", "w2")
    keys: dict[str, Ed25519PrivateKey] = field(default_factory=dict)
    servers: dict[str, WitnessServer] = field(default_factory=dict)
    urls: dict[str, str] = field(default_factory=dict)

    def witness(self, name: str) -> Witness:
        key = self.keys.setdefault(name, Ed25519PrivateKey.generate())
        return Witness(f"{name}.example/witness", key, parse_logs(self.logs), self.state(name))

    def state(self, name: str) -> Path:
        return self.tmp / f"{name}.sqlite"

    def start(self, name: str) -> WitnessServer:
        """Serve `name` (bound, so ready, before this returns) on its old port if it had one."""
        port = int(self.urls[name].rsplit(":", 1)[1]) if name in self.urls else 0
        server = WitnessServer(self.witness(name), "127.0.0.1", port).start()
        self.servers[name], self.urls[name] = server, server.url
        return server

    def stop(self, name: str) -> None:
        self.servers.pop(name).close()

    def backup(self, name: str, to: Path) -> None:
        shutil.copyfile(self.state(name), to)

    def policy(self, log_vkey: str, quorum: str = "both") -> bytes:
        lines = [f"log {log_vkey}"]
        for n in self.names:
            lines.append(f"witness {n} {self.witness(n).vkey.text()} {self.urls.get(n, '')}")
        lines += [f"group both all {' '.join(self.names)}", f"quorum {quorum}"]
        return ("\n".join(line.rstrip() for line in lines) + "\n").encode()


@pytest.fixture
def witnesses(ledger: Ledger, tmp_path: Path) -> Iterator[Witnesses]:
    vkey = ok(ledger("log", "vkey")).out.strip()
    ws = Witnesses(tmp_path, f"# the ledger under test\nlog {vkey}\n".encode())
    for n in ws.names:
        ws.start(n)
    yield ws
    for n in list(ws.servers):
        ws.stop(n)


@pytest.fixture
def policy_file(ledger: Ledger, witnesses: Witnesses, tmp_path: Path) -> Path:
    vkey = ok(ledger("log", "vkey")).out.strip()
    p = tmp_path / "policy.txt"
    p.write_bytes(witnesses.policy(vkey))
    return p
