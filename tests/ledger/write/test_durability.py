"""Every write waits its turn, and a SIGKILL loses nothing acknowledged: on
SQLite and PostgreSQL, with forked writer processes (no interpreter start-up
per trial, so the trials stay fast)."""

from __future__ import annotations

import multiprocessing
import os
import random
import select
import signal
import time
from pathlib import Path

import git
import pytest

from ledger.store.store import Store
from ledger.transparency.audit import audit
from tests.ledger.helpers import run
from tests.ledger.writers import write_loop

FORK = multiprocessing.get_context("fork")


def _setup(db_url: str, key_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    for args in (("init",), ("keys", "new", "runner", "--role", "runner")):
        assert run(capsys, *args, "--db", db_url).code == 0
    art = tmp_path / "memory-snapshot.json"
    art.write_text('{"peak_bytes": 123}\n')
    return str(art)


def _read_acks(fd: int, acks: list[str], deadline: float) -> None:
    while True:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(0.0, left))
        if not ready:
            return
        chunk = os.read(fd, 65536)
        if not chunk:
            return
        acks.extend(chunk.decode().split())


def _check(db_url: str, acks: list[str]) -> int:
    store = Store.open(db_url)
    try:
        missing = [a for a in acks if not a.startswith("FAIL:") and store.entry(a) is None]
        assert not missing, f"acknowledged but not in the log: {missing[:3]}"
        rep = audit(store)
        assert rep.ok, rep.problems[:5]
        return rep.entries
    finally:
        store.engine.dispose()


def test_eight_concurrent_writers(
    db_url: str,
    key_dir: Path,
    repo: git.Repo,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """8 processes mixing attest --artifact, record and log checkpoint: none
    fails, no gap, audit clean."""
    art = _setup(db_url, key_dir, tmp_path, capsys)
    rounds = 3
    procs, pipes = [], []
    for w in range(8):
        r, wfd = os.pipe()
        p = FORK.Process(
            target=write_loop,
            args=(db_url, key_dir, str(repo.working_tree_dir), art, f"w{w}", wfd, rounds),
        )
        p.start()
        os.close(wfd)
        procs.append(p)
        pipes.append(r)
    acks: list[str] = []
    for p, r in zip(procs, pipes, strict=True):
        p.join(120)
        assert p.exitcode == 0
        _read_acks(r, acks, time.monotonic() + 1)
        os.close(r)
    failures = [a for a in acks if a.startswith("FAIL:")]
    assert not failures, failures[:3]
    # Every command acknowledged: 8 writers x rounds x (record + attest).
    assert len(acks) == 8 * rounds * 2, len(acks)
    entries = _check(db_url, acks)
    print(f"concurrent writers: 8, {len(acks)} acknowledged, {entries} entries, audit clean")


def _crash_trials(
    db_url: str, key_dir: Path, repo: git.Repo, art: str, trials: int, seed: int
) -> tuple[int, int]:
    rng = random.Random(seed)
    acks: list[str] = []
    for t in range(trials):
        r, wfd = os.pipe()
        p = FORK.Process(
            target=write_loop, args=(db_url, key_dir, str(repo.working_tree_dir), art, f"t{t}", wfd)
        )
        p.start()
        os.close(wfd)
        _read_acks(r, acks, time.monotonic() + rng.uniform(0.05, 0.5))
        assert p.pid is not None
        os.kill(p.pid, signal.SIGKILL)
        p.join(10)
        _read_acks(r, acks, time.monotonic() + 0.05)
        os.close(r)
    # A command the SIGKILL did not interrupt must not have failed either.
    assert not [a for a in acks if a.startswith("FAIL:")], acks
    return len(acks), _check(db_url, acks)


@pytest.mark.parametrize("db_url", ["sqlite", "postgresql"], indirect=True)
def test_sigkill_loses_nothing_acknowledged(
    db_url: str,
    key_dir: Path,
    repo: git.Repo,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    trials = 20 if db_url.startswith("sqlite") else 10
    art = _setup(db_url, key_dir, tmp_path, capsys)
    acked, entries = _crash_trials(db_url, key_dir, repo, art, trials, seed=9)
    backend = db_url.split(":")[0]
    print(
        f"crash trials ({backend}): {trials} SIGKILLs, {acked} acknowledged, 0 lost, "
        f"{entries} entries, no gap, audit clean"
    )
