"""Crash trials: writers killed with SIGKILL at random moments, and a server
under POSTs killed and restarted, then every acknowledged id looked up and
the whole log audited.

Each trial forks a writer that loops `record`, `attest --artifact` and `log
checkpoint` (acknowledging an id only after the command returned 0) and
kills it after a random delay. Meanwhile a client posts envelopes to a
`ledger serve` subprocess, counting an id as acknowledged on a 2xx answer;
every 25 trials the server itself is SIGKILLed and started again.

    python -m benchmarks.crash [--trials 200] [--db URL] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import git

from ledger.evidence.keys import KeyDir
from ledger.store.store import Store
from ledger.transparency.audit import audit

__all__ = ["main"]

FORK = multiprocessing.get_context("fork")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """`ledger serve` in a subprocess, killed and restarted on demand."""

    def __init__(self, db: str, keys: Path) -> None:
        self.db, self.keys = db, keys
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.kills = 0
        self.log = keys.parent / "serve.log"

    def start(self) -> None:
        env = {**os.environ, "LEDGER_KEYS": str(self.keys)}
        entry = "import sys; from ledger.cli import main; sys.exit(main(sys.argv[1:]))"
        cmd = [
            sys.executable,
            "-c",
            entry,
            "serve",
            "--db",
            self.db,
            "--port",
            str(self.port),
        ]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log)
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1).read()
                return
            except (urllib.error.URLError, OSError):
                time.sleep(0.05)
        raise RuntimeError(f"ledger serve did not start: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.kills += 1


def _poster(server: Server, runner_keys: Path, acks: list[str], stop: threading.Event) -> None:
    from tests.ledger.factories import envelope

    runner = KeyDir(runner_keys).load("runner")
    n = 0
    while not stop.is_set():
        n += 1
        body = envelope(runner, claim=f"http.{n}")
        req = urllib.request.Request(
            f"http://127.0.0.1:{server.port}/v1/envelopes",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                acks.extend(d["id"] for d in json.loads(r.read()))
        except (urllib.error.URLError, OSError, ValueError):
            time.sleep(0.02)  # the server is down (being killed): not acknowledged


def _read(fd: int, out: list[str], until: float) -> None:
    while True:
        ready, _, _ = select.select([fd], [], [], max(0.0, until - time.monotonic()))
        if not ready:
            return
        chunk = os.read(fd, 65536)
        if not chunk:
            return
        out.extend(chunk.decode().split())


def run(trials: int, db: str | None, seed: int) -> dict[str, int]:
    from tests.ledger.writers import write_loop

    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        url = db or f"sqlite:///{folder / 'ledger.db'}"
        keys = folder / "keys"
        os.environ["LEDGER_KEYS"] = str(keys)
        from ledger.cli import main as cli

        for args in (["init"], ["keys", "new", "runner", "--role", "runner"]):
            if cli([*args, "--db", url]) != 0:
                raise RuntimeError(f"setup failed: {args}")
        repo = git.Repo.init(folder / "repo", initial_branch="main")
        (folder / "repo" / "a.py").write_text("x = 1\n")
        repo.index.add(["a.py"])
        actor = git.Actor("Bench", "bench@example.com")
        repo.index.commit("initial", author=actor, committer=actor)
        art = folder / "memory-snapshot.json"
        art.write_text('{"peak_bytes": 123}\n')

        server = Server(url, keys)
        server.start()
        http_acks: list[str] = []
        stop = threading.Event()
        poster = threading.Thread(target=_poster, args=(server, keys, http_acks, stop))
        poster.start()
        cli_acks: list[str] = []
        for t in range(trials):
            r, w = os.pipe()
            p = FORK.Process(
                target=write_loop, args=(url, keys, str(folder / "repo"), str(art), f"t{t}", w)
            )
            p.start()
            os.close(w)
            _read(r, cli_acks, time.monotonic() + rng.uniform(0.05, 0.5))
            assert p.pid is not None
            os.kill(p.pid, signal.SIGKILL)
            p.join(10)
            _read(r, cli_acks, time.monotonic() + 0.02)
            os.close(r)
            if t % 25 == 24:
                server.kill()
                server.start()
        stop.set()
        poster.join(30)
        server.kill()

        failures = [a for a in cli_acks if a.startswith("FAIL:")]
        ids = [a for a in cli_acks if not a.startswith("FAIL:")] + http_acks
        store = Store.open(url)
        lost = sum(1 for i in ids if store.entry(i) is None)
        rep = audit(store)
        store.engine.dispose()
        return {
            "trials": trials,
            "server_kills": server.kills,
            "acknowledged_cli": len(ids) - len(http_acks),
            "acknowledged_http": len(http_acks),
            "lost": lost,
            "failed_commands": len(failures),
            "entries": rep.entries,
            "audit_problems": len(rep.problems),
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--db", help="database URL (default: a fresh SQLite file)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    f = run(a.trials, a.db, a.seed)
    backend = (a.db or "sqlite").split(":")[0]
    print(
        f"crash ({backend}): {f['trials']} writer SIGKILLs, {f['server_kills']} server SIGKILLs; "
        f"acknowledged {f['acknowledged_cli']} (CLI) + {f['acknowledged_http']} (HTTP), "
        f"lost {f['lost']}; {f['entries']} entries, audit problems {f['audit_problems']}"
    )
    return 0 if f["lost"] == 0 and f["audit_problems"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
