"""`status` over HTTP for one pull request, alone and when many other repositories share
its number, in the same run.

Two ledgers hold the same asked repository: a PR whose head failed a claim (recorded
with its merge-base, so the answer sets it beside the base) and passed another, the
base commit's receipts, and the plan recorded for the base branch (`ledger plan
record`, so the server judges without a checkout, as the web pages do). The second
ledger adds R other repositories whose receipts name the same PR number. A `ledger
serve` per ledger answers `GET /v1/status?repo=..&pr=..`; before each timed question
one unrelated receipt is appended, so every answer is computed (the server keeps
answers only while the log size is unchanged), never served from memory.

    python -m benchmarks.status_http_shared [--others 1500] [--requests 200]

Prints the median latency of each and their ratio (target: flat, about 1.0).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import git
import httpx

from ledger.evidence.keys import KeyDir, LocalKey
from ledger.store.store import Store
from ledger.units.numbers import number
from ledger.write.ingest import init_ledger, record, register_key
from tests.ledger.factories import envelope

ROOT = Path(__file__).resolve().parents[1]
PR = 7
ASKED = "github.com/org/asked"
PLAN = f"""[project]
repo = "{ASKED}"

[[claims]]
name = "a.passes"
check = "admission"
cleanup = false

[[claims]]
name = "b.fails"
check = "admission"
cleanup = false
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise SystemExit(f"no server at {url}")


def _ledger_cli(env: dict[str, str], cwd: Path, *args: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "ledger", *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    if r.returncode != 0:
        raise SystemExit(f"ledger {' '.join(args)}: {r.stderr.strip()}")


def _commit(r: git.Repo, path: str, text: str, msg: str) -> None:
    assert r.working_tree_dir is not None
    f = Path(r.working_tree_dir) / path
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(text)
    r.index.add([path])
    r.index.commit(msg)


def _asked(root: Path, env: dict[str, str]) -> None:
    """The asked repository's receipts and its recorded plan, through the CLI."""
    r = git.Repo.init(root / "asked", initial_branch="main")
    with r.config_writer() as c:
        c.set_value("user", "name", "bench")
        c.set_value("user", "email", "bench@example.test")
    _commit(r, "model/planner.py", "budget = 1\n", "base")
    _commit(r, "qualification.toml", PLAN, "plan")
    r.git.checkout("-b", "feature")
    _commit(r, "model/planner.py", "budget = 2\n", "change")
    r.git.update_ref(f"refs/pull/{PR}/head", r.head.commit.hexsha)
    r.git.checkout("main")
    where = Path(str(r.working_tree_dir))
    attest = ["attest", "--key", "runner", "--allow-dirty", "--repo", str(where)]
    _ledger_cli(env, where, *attest, "--claim", "b.fails", "--rev", "main", "--outcome", "passed")
    for claim, outcome in (("a.passes", "passed"), ("b.fails", "failed")):
        why = ("--reason", "peak 9.1 GiB over 8 GiB") if outcome == "failed" else ()
        pr = ("--pr", str(PR), "--offline")
        _ledger_cli(env, where, *attest, *pr, "--claim", claim, "--outcome", outcome, *why)
    _ledger_cli(env, where, "plan", "record", "--branch", "main", "--repo", str(where))


def _others(url: str, runner: LocalKey, n: int) -> None:
    """``n`` other repositories, two receipts each for the same PR number."""
    store = Store.open(url)
    envs = []
    for j in range(n):
        head = hashlib.sha1(f"o{j}".encode(), usedforsecurity=False).hexdigest()
        src = {"repo": f"github.com/other/r{j:04d}", "commit": head, "tree": head}
        for claim in ("a.passes", "b.fails"):
            envs.append(envelope(runner, claim=claim, source={**src, "dirty": False, "pr": PR}))
    for i in range(0, len(envs), 500):
        record(store, envs[i : i + 500])
    store.dispose()


def _fillers(runner: LocalKey, n: int) -> Iterator[bytes]:
    """Receipts of an unrelated repository, one appended before each question."""
    for i in range(n):
        head = hashlib.sha1(f"f{i}".encode(), usedforsecurity=False).hexdigest()
        src = {"repo": "github.com/org/filler", "commit": head, "tree": head, "dirty": False}
        yield envelope(runner, claim="a.passes", source=src)


def _latency(db: str, keys: KeyDir, env: dict[str, str], n: int) -> list[float]:
    """Seconds per computed `GET /v1/status` answer, ``n`` of them (one warm-up)."""
    port = _port()
    cmd = [sys.executable, "-m", "ledger", "serve", "--port", str(port), "--db", db]
    srv = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store = Store.open(db)
    fillers = _fillers(keys.load("runner"), n + 1)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait(base + "/healthz")
        q = {"repo": ASKED, "pr": str(PR)}
        out = []
        with httpx.Client(timeout=60) as c:
            for i in range(n + 1):
                record(store, [next(fillers)])  # a new log size: the answer is computed
                t0 = time.perf_counter()
                r = c.get(base + "/v1/status", params=q)
                took = time.perf_counter() - t0
                r.raise_for_status()
                doc = r.json()
                if not doc["governed"] or doc["verdict"]["blockers"][0]["attribution"] is None:
                    raise SystemExit("the asked PR was not judged beside its base")
                if i:
                    out.append(took)
        return out
    finally:
        srv.terminate()
        srv.wait()
        store.dispose()


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--others", type=int, default=1500)
    ap.add_argument("--requests", type=int, default=200)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ledger-status-shared-"))
    keys = KeyDir(tmp / "keys")
    alone = tmp / "alone.db"
    url = f"sqlite:///{alone}"
    init_ledger(url, keys)
    runner = keys.create("runner")
    store = Store.open(url)
    register_key(store, "runner", "runner", runner.public)
    store.dispose()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "LEDGER_KEYS": str(keys.path),
        "LEDGER_DB": url,
        "XDG_DATA_HOME": str(tmp / "data"),
    }
    _asked(tmp, env)
    shared = tmp / "shared.db"
    with sqlite3.connect(alone) as src, sqlite3.connect(shared) as dst:
        src.backup(dst)  # the WAL's pages too
    _others(f"sqlite:///{shared}", runner, args.others)
    rows = []
    for name, db in (("alone", alone), (f"shared by {args.others:,}", shared)):
        took = _latency(f"sqlite:///{db}", keys, {**env, "LEDGER_DB": ""}, args.requests)
        rows.append((name, statistics.median(took)))
    print(
        f"\nGET /v1/status?repo=..&pr={PR}, each answer computed (a receipt appended"
        f" before each); median of {args.requests}, SQLite"
    )
    print(f"{'PR':<20} {'median':>10}")
    for name, s in rows:
        print(f"{name:<20} {number(s * 1000):>7} ms")
    print(f"shared / alone: {number(rows[1][1] / rows[0][1])}x (target: flat, about 1.0)")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
