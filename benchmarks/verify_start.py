"""Wall time of `ledger verify BUNDLE --trust PEM` (a fresh interpreter, as a
reviewer runs it) beside an empty interpreter and beside bare imports of what
offline verification needs, measured round-robin in one run.

    python -m benchmarks.verify_start [--runs 20]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import git

from ledger.cli import main as ledger

ROWS = {
    "python -c pass (empty interpreter)": ["-c", "pass"],
    "python -c 'import pydantic'": ["-c", "import pydantic"],
    "python -c 'import ledger.models'": ["-c", "import ledger.models"],
    "python -c 'import ledger.cli'": ["-c", "import ledger.cli"],
    "ledger verify BUNDLE --trust PEM": [],
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
        with contextlib.redirect_stdout(out):
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
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        bundle, pem = _bundle(Path(d))
        cmds = {
            k: [
                sys.executable,
                *(v or ["-m", "ledger", "verify", str(bundle), "--trust", str(pem)]),
            ]
            for k, v in ROWS.items()
        }
        samples: dict[str, list[float]] = {k: [] for k in cmds}
        for _ in range(args.runs):  # round-robin: a busy machine slows every row alike
            for k, cmd in cmds.items():
                t = time.perf_counter()
                subprocess.run(cmd, check=True, capture_output=True)
                samples[k].append(time.perf_counter() - t)
    base = statistics.median(samples[next(iter(cmds))])
    print(f"median of {args.runs} runs each, round-robin")
    print(f"{'command':<38} {'ms':>8} {'x empty':>8}")
    for k, v in samples.items():
        m = statistics.median(v)
        print(f"{k:<38} {m * 1e3:>8.1f} {m / base:>8.2f}")
    print("target: ledger verify BUNDLE at most 3x an empty interpreter")


if __name__ == "__main__":
    main()
