"""Wall time of `ledger verify BUNDLE --trust PEM` (a fresh interpreter, as a
reviewer runs it) beside an empty interpreter and beside bare imports,
measured round-robin in one run.

    python -m benchmarks.verify_start [--runs 20] [--compare DIR]

Two ways Python may find the ledger's bytecode, each with its own
empty-interpreter baseline: "cached" (every module's bytecode in a warmed
cache, as in an installed package or a checkout run before; a temporary
PYTHONPYCACHEPREFIX, so the tree is not written), and "ledger from source"
(a copy of the `ledger` package without __pycache__, with
PYTHONDONTWRITEBYTECODE: its modules compiled on every run, as where bytecode
is never written; the standard library and dependencies keep theirs).
`--compare DIR` adds the same command run from another checkout (e.g. the
one before a change).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import git

from ledger.cli import main as ledger

HERE = Path(__file__).resolve().parents[1]
IMPORTS = {
    "python -c pass (empty interpreter)": "pass",
    "python -c 'import click'": "import click",
    "python -c 'import ledger.evidence.models'": "import ledger.evidence.models",
}


def _bundle(tmp: Path) -> tuple[Path, Path]:
    """A one-receipt ledger, exported: (bundle, the ledger key's PEM)."""
    os.environ["LEDGER_KEYS"] = str(tmp / "keys")
    db = ("--db", str(tmp / "l.db"))
    r = git.Repo.init(tmp / "repo", initial_branch="main")
    a = git.Actor("Bench", "bench@example.com")
    r.index.commit("x", author=a, committer=a)
    attest = ["attest", "--unplanned", "--claim", "c", "--rev", "HEAD", "--outcome", "passed"]
    steps = [
        ["init", *db],
        ["keys", "new", "r", "--role", "runner", *db],
        [*attest, "--repo", str(tmp / "repo"), "--key", "r", *db],
    ]
    out = io.StringIO()
    for argv in steps:
        out.seek(0)
        out.truncate()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            if ledger(argv) != 0:
                raise SystemExit(f"ledger {' '.join(argv)} failed")
    rid = out.getvalue().strip()
    bundle = tmp / "bundle.json"
    with contextlib.redirect_stdout(io.StringIO()):
        if ledger(["export", rid, "-o", str(bundle), *db]) != 0:
            raise SystemExit("export failed")
    return bundle, tmp / "keys" / "ledger.pem"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--compare", type=Path, help="another checkout, run the same way")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        bundle, pem = _bundle(Path(d))
        verify = ["-m", "ledger", "verify", str(bundle), "--trust", str(pem)]
        rows: dict[str, tuple[list[str], Path]] = {
            k: (["-c", code], HERE) for k, code in IMPORTS.items()
        }
        rows["ledger verify BUNDLE --trust PEM"] = (verify, HERE)
        if args.compare:
            rows[f"  the same, from {args.compare}"] = (verify, args.compare.resolve())
        plain = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "PYTHONPATH")
        }
        modes = {
            "cached": {**plain, "PYTHONPYCACHEPREFIX": str(Path(d) / "pycache")},
            "ledger from source": {**plain, "PYTHONDONTWRITEBYTECODE": "1"},
        }
        sources = {}
        for i, root in enumerate(sorted({r for _, r in rows.values()})):
            sources[root] = Path(d) / f"source-{i}"
            shutil.copytree(
                root / "ledger",
                sources[root] / "ledger",
                ignore=shutil.ignore_patterns("__pycache__"),
            )
        cmds = {
            (mode, row): (
                [sys.executable, *argv],
                {**env, "PYTHONPATH": str(sources[root] if mode != "cached" else root)},
            )
            for mode, env in modes.items()
            for row, (argv, root) in rows.items()
        }
        # From a neutral folder: `-m` and `-c` put the working folder first on sys.path.
        for cmd, env in cmds.values():  # warm the cache, and fail early
            subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=d)
        samples: dict[tuple[str, str], list[float]] = {k: [] for k in cmds}
        for _ in range(args.runs):  # round-robin: a busy machine slows every row alike
            for k, (cmd, env) in cmds.items():
                t = time.perf_counter()
                subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=d)
                samples[k].append(time.perf_counter() - t)
    print(f"median of {args.runs} runs each, round-robin; load average {os.getloadavg()[0]:.2f}")
    for mode in modes:
        base = statistics.median(samples[(mode, next(iter(rows)))])
        print(f"\nbytecode {mode}")
        print(f"{'command':<44} {'ms':>8} {'x empty':>8}")
        for row in rows:
            m = statistics.median(samples[(mode, row)])
            print(f"{row:<44} {m * 1e3:>8.1f} {m / base:>8.2f}")
    print("\ntarget: ledger verify BUNDLE at most 3x an empty interpreter")


if __name__ == "__main__":
    main()
