"""`status --server` checked against the server's log (`--trust`), beside today's path
that believes the answer, in the same run, on `status_http_shared`'s ledger: the asked
repository's PR (a failed claim set beside its base) in a ledger where R other
repositories' receipts name the same PR number.

A `ledger serve` (its own process) answers the posted question. Before each timed
question one unrelated receipt is appended and a checkpoint signed, so every answer is
computed by the server (never kept) and the checked client has two entries to fetch
(one before its question and one before today's):
the warm client syncs from its last checkpoint, then the one judge decides on the log
it holds. The two paths alternate, question by question. The first sync (an empty
cache: every entry up to the checkpoint fetched, hashed and indexed) is timed apart.

    python -m benchmarks.status_checked [--others 1500] [--requests 100] [--cold 3]
        [--commands 10]

Prints the median of each, their ratio (target: the warm check within 2x today's), the
same for the whole command (`ledger status --server ... --json`, a process each, with
and without --trust, alternating), and the first sync's cost with the log's size.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import git

from ledger.evidence.keys import KeyDir
from ledger.plans.governing import identify
from ledger.read.checked import check_status
from ledger.read.reader import RemoteReader
from ledger.store.store import Store
from ledger.transparency.checkpoints import checkpoint
from ledger.units.numbers import number
from ledger.write.ingest import init_ledger, record, register_key

# The ledger `status_http_shared` builds, reused. Imported by name: benchmarks/ is no
# package, and mypy reads each of its scripts once, as a module of its own.
_shared: Any = importlib.import_module("benchmarks.status_http_shared")
PR: int = _shared.PR


def _ms(seconds: float) -> str:
    return f"{number(seconds * 1000)} ms"


def _cli(env: dict[str, str], *args: str, ok: int) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        [sys.executable, "-m", "ledger", *args], env=env, capture_output=True, text=True
    )
    if r.returncode != ok:
        raise SystemExit(f"ledger {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


class _Bench:
    """The ledger, its server and the asked question: each path timed against them."""

    def __init__(self, tmp: Path, others: int, fillers: int) -> None:
        self.tmp = tmp
        self.keys = KeyDir(tmp / "keys")
        self.url = f"sqlite:///{tmp / 'ledger.db'}"
        init_ledger(self.url, self.keys)
        runner = self.keys.create("runner")
        store = Store.open(self.url)
        register_key(store, "runner", "runner", runner.public)
        store.dispose()
        root = Path(__file__).resolve().parents[1]
        self.env = {
            **os.environ,
            "PYTHONPATH": str(root),
            "LEDGER_KEYS": str(self.keys.path),
            "LEDGER_DB": self.url,
            "XDG_DATA_HOME": str(tmp / "data"),
        }
        _shared._asked(tmp, self.env)
        _shared._others(self.url, runner, others)
        self.store = Store.open(self.url)
        checkpoint(self.store, self.keys)
        self.ledger_key = next(k.public for k in self.store.keys().values() if k.role == "ledger")
        self.ident = identify(git.Repo(tmp / "asked"), pr=PR, offline=True)
        self.fillers = _shared._fillers(runner, fillers)
        self.base = ""

    def serve(self) -> subprocess.Popen[bytes]:
        port = _shared._port()
        cmd = [sys.executable, "-m", "ledger", "serve", "--port", str(port), "--db", self.url]
        srv = subprocess.Popen(
            cmd,
            env={**self.env, "LEDGER_DB": ""},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.base = f"http://127.0.0.1:{port}"
        _shared._wait(self.base + "/healthz")
        self.reader = RemoteReader(self.base)
        return srv

    def fresh(self) -> None:
        record(self.store, [next(self.fillers)])  # a new log size: the answer is computed
        checkpoint(self.store, self.keys)

    def today(self) -> float:
        t0 = time.perf_counter()
        doc = self.reader.status(self.ident)
        took = time.perf_counter() - t0
        if doc["verdict"]["exit_code"] != 1:
            raise SystemExit("the asked PR was not judged as failed")
        return took

    def checked(self, cache: Path) -> tuple[float, int]:
        t0 = time.perf_counter()
        doc = check_status(
            self.base,
            self.ident,
            (),
            {},
            lambda: self.reader.status(self.ident),
            [self.ledger_key],
            None,
            cache,
        )
        return time.perf_counter() - t0, int(doc["checked"]["fetched"])

    def first_syncs(self, n: int) -> tuple[list[float], int]:
        """Seconds of `n` checks from an empty cache, and the log's size."""
        out, size = [], 0
        for i in range(n):
            self.fresh()
            where = self.tmp / f"cold{i}"
            took, size = self.checked(where)
            out.append(took)
            shutil.rmtree(where)
        return out, size

    def questions(self, n: int) -> tuple[list[float], list[float]]:
        """Today's and the warm check's seconds, alternating, `n` each."""
        cache = self.tmp / "warm"
        self.fresh()
        self.checked(cache)  # the first sync of the warm client
        plain: list[float] = []
        warm: list[float] = []
        for _ in range(n):
            self.fresh()
            plain.append(self.today())
            self.fresh()
            took, fetched = self.checked(cache)
            if fetched != 2:  # the one appended before each path's question
                raise SystemExit(f"the warm client fetched {fetched} entries, not 2")
            warm.append(took)
        return plain, warm

    def commands(self, n: int) -> tuple[list[float], list[float]]:
        """The whole command's seconds, without and with --trust (warm), `n` each."""
        pem = self.tmp / "ledger.pem"
        pem.write_text(_cli(self.env, "keys", "export", "ledger", ok=0).stdout)
        env = {**self.env, "LEDGER_DB": "", "LEDGER_CACHE": str(self.tmp / "cli-cache")}
        ask = ["status", "--repo", str(self.tmp / "asked"), "--pr", str(PR), "--offline"]
        ask += ["--server", self.base, "--json"]

        def command(*more: str) -> float:
            t0 = time.perf_counter()
            _cli(env, *ask, *more, ok=1)
            return time.perf_counter() - t0

        self.fresh()
        command("--trust", str(pem))  # the command's cache, synced once
        plain: list[float] = []
        warm: list[float] = []
        for _ in range(n):
            self.fresh()
            plain.append(command())
            self.fresh()
            warm.append(command("--trust", str(pem)))
        return plain, warm


def _report(
    args: argparse.Namespace,
    questions: tuple[list[float], list[float]],
    commands: tuple[list[float], list[float]],
    cold: tuple[list[float], int],
) -> None:
    a, b = statistics.median(questions[0]), statistics.median(questions[1])
    print(
        f"\n{args.others:,} other repositories share PR #{PR}; SQLite; "
        f"{args.requests} questions per path, alternating; each answer computed by the server"
    )
    print(f"{'path':<52} {'median':>10}")
    print(f"{'status --server (the server believed)':<52} {_ms(a):>10}")
    print(f"{'status --server --trust, warm (2 new entries)':<52} {_ms(b):>10}")
    print(f"warm / today: {number(b / a)}x (target: within 2x)")
    if commands[0]:
        c, d = statistics.median(commands[0]), statistics.median(commands[1])
        print(f"{'the whole command, `ledger status --server ...`':<52} {_ms(c):>10}")
        print(f"{'the whole command with --trust, warm':<52} {_ms(d):>10}")
        print(f"warm / today, whole command ({len(commands[0])} each): {number(d / c)}x")
    print(
        f"first sync (empty cache, {cold[1]:,} entries up to the checkpoint), "
        f"median of {len(cold[0])}: {_ms(statistics.median(cold[0]))}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--others", type=int, default=1500)
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--cold", type=int, default=3, help="first syncs timed (empty caches)")
    ap.add_argument("--commands", type=int, default=10, help="whole commands per path")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ledger-status-checked-"))
    bench = _Bench(tmp, args.others, 2 * (args.requests + args.commands) + args.cold + 3)
    srv = bench.serve()
    try:
        cold = bench.first_syncs(args.cold)
        questions = bench.questions(args.requests)
        commands = bench.commands(args.commands)
    finally:
        srv.terminate()
        srv.wait()
        bench.store.dispose()
    _report(args, questions, commands, cold)


if __name__ == "__main__":
    main()
