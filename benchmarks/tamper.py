"""Tamper detection: random single-byte mutations of stored rows, each audited.

Builds one small ledger (keys, receipts with scope facets and an artifact, a
revocation, a checkpoint), then for each trial copies it, changes one byte
of one stored value behind the ledger's back (triggers dropped, plain SQL)
and runs the audit. A trial counts as detected when the audit reports a
problem that names the entry, row, checkpoint or artifact it concerns.

    python -m benchmarks.tamper [--trials 1000] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import re
import sqlite3
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ledger.evidence.keys import KeyDir
from ledger.store.store import Store
from ledger.transparency.audit import audit
from ledger.transparency.checkpoints import checkpoint

__all__ = ["Tally", "build", "main", "run_trials", "trial"]

NAMED = re.compile(r"^(entry \d+ \(|checkpoint \d+|artifact \S+:|[a-z_]+ row \d+|sequence gap)")
TABLES = ("log_entry", "receipt", "scope_facet", "key", "revocation", "checkpoint", "artifact")


@dataclass
class Tally:
    trials: int = 0
    detected: int = 0
    missed: list[str] = field(default_factory=list)
    crashed: list[str] = field(default_factory=list)


def build(folder: Path) -> Path:
    """A small ledger with every kind of stored row; returns its single-file path."""
    from ledger.evidence.statement import read_artifact
    from ledger.write.ingest import init_ledger, record, register_key, revoke_key
    from ledger.write.revocation_signing import operator_key
    from tests.ledger.factories import envelope

    db = folder / "base.db"
    url = f"sqlite:///{db}"
    keys = KeyDir(folder / "keys")
    init_ledger(url, keys)
    store = Store.open(url)
    runner = keys.create("runner")
    register_key(store, "runner", "runner", runner.public)
    snap = folder / "memory-snapshot.json"
    snap.write_text('{"peak_bytes": 123}\n')
    art = read_artifact(snap)
    record(store, [envelope(runner, artifacts=[art.artifact.model_dump(mode="json")])], [art])
    for n in range(3):
        record(store, [envelope(runner, claim=f"claim.{n}", scope={"gpu_count": n, "k": "v"})])
    old = keys.create("old")
    register_key(store, "old", "runner", old.public)
    revoke_key(store, old.keyid, "host retired", key=operator_key(store, keys))
    checkpoint(store, keys)
    store.engine.dispose()
    # A consistent single-file copy (the WAL folded in) to copy per trial.
    single = folder / "single.db"
    with sqlite3.connect(db) as src, sqlite3.connect(single) as dst:
        src.backup(dst)
    with sqlite3.connect(single) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")
    return single


def _cells(conn: sqlite3.Connection) -> list[tuple[str, int, str]]:
    out = []
    for t in TABLES:
        cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')]
        for (rowid,) in conn.execute(f'SELECT rowid FROM "{t}"'):
            for c in cols:
                v = conn.execute(f'SELECT "{c}" FROM "{t}" WHERE rowid = ?', (rowid,)).fetchone()
                if v[0] not in (None, "", b""):
                    out.append((t, rowid, c))
    return out


def _mutate(conn: sqlite3.Connection, rng: random.Random, cell: tuple[str, int, str]) -> str:
    t, rowid, c = cell
    (v,) = conn.execute(f'SELECT "{c}" FROM "{t}" WHERE rowid = ?', (rowid,)).fetchone()
    new: object
    if isinstance(v, int):
        s = str(v)
        i = rng.randrange(len(s))
        digits = [d for d in "0123456789" if d != s[i] and not (i == 0 and d == "0" and len(s) > 1)]
        new = int(s[:i] + rng.choice(digits) + s[i + 1 :]) if digits else v + 1
        sql = f'UPDATE "{t}" SET "{c}" = ? WHERE rowid = ?'
    else:
        raw = bytearray(v if isinstance(v, bytes) else v.encode())
        i = rng.randrange(len(raw))
        raw[i] = rng.choice([b for b in range(256) if b != raw[i]])
        new = bytes(raw)
        cast = "?" if isinstance(v, bytes) else "CAST(? AS TEXT)"
        sql = f'UPDATE "{t}" SET "{c}" = {cast} WHERE rowid = ?'
    conn.execute(sql, (new, rowid))
    return f"{t}.{c} row {rowid}"


def trial(base: bytes, path: Path, rng: random.Random, tally: Tally) -> None:
    path.write_bytes(base)
    with sqlite3.connect(path) as conn:
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"):
            conn.execute(f'DROP TRIGGER "{name}"')
        cells = _cells(conn)
        while True:
            cell = rng.choice(cells)
            try:
                what = _mutate(conn, rng, cell)
                break
            except sqlite3.IntegrityError:  # e.g. a seq changed into one that exists
                continue
    tally.trials += 1
    store = Store(Store._engine(f"sqlite:///{path}"), f"sqlite:///{path}")
    try:
        rep = audit(store)
    except Exception as e:  # a crash is a finding, not the end of the run
        tally.crashed.append(f"{what}: {type(e).__name__}: {e}")
        return
    finally:
        store.engine.dispose()
    if not rep.ok and any(NAMED.match(p) for p in rep.problems):
        tally.detected += 1
    else:
        tally.missed.append(f"{what}: {rep.problems}")


def run_trials(trials: int, seed: int) -> Tally:
    rng = random.Random(seed)
    tally = Tally()
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        base = build(folder).read_bytes()
        for _ in range(trials):
            trial(base, folder / "trial.db", rng, tally)
    return tally


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    t = run_trials(a.trials, a.seed)
    print(f"tamper: {t.detected}/{t.trials} single-byte row mutations detected (seed {a.seed})")
    for m in t.missed[:10]:
        print(f"  missed: {m}")
    for c in t.crashed[:10]:
        print(f"  audit crashed: {c}")
    return 0 if t.detected == t.trials and not t.crashed else 1


if __name__ == "__main__":
    sys.exit(main())
