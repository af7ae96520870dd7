"""The fork server's start, split: what the example plan's server pays before its first
claim, each part timed in a fresh interpreter as `runners.fork.forkimports.preload`
pays it.

    python -m benchmarks.fork_start [--profile h200|cpu] [--threads 1,N] [--top N] [--out FILE]

Parts, in the server's order: ``torch`` (its import), ``harness`` (`runners.api`, the
rank server and `runners.fork.forkparent.ALWAYS`, what every check imports), ``preload`` (the plan's
``preload`` modules: transformers and peft) and ``prepare`` (the workload built once on
CPU: `runners.workloads.loader.prepare_workload`). The server computes on one thread
(a forked claim must not inherit a thread pool); ``--threads`` also times the same on
more, for comparison. Prints one row per thread count; ``--out`` writes them as JSON.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "qwen3_moe"
PARTS = ("torch", "harness", "preload", "prepare")


def plan_of(profile: str) -> tuple[str, list[str], dict[str, Any]]:
    """The example plan's workload entry point, preloads and parameters under ``profile``."""
    doc = tomllib.loads((EXAMPLE / "qualification.toml").read_text())
    params = {**doc.get("workload_params", {})}
    params.update(doc.get("profiles", {}).get(profile, {}).get("workload_params", {}))
    return str(doc["workload"]), list(doc.get("preload", [])), params


def child(
    ref: str, preload: list[str], params: dict[str, Any], threads: int, top: int = 0
) -> dict[str, float]:
    """In this (fresh) interpreter: each part's seconds (and, with ``top``, the
    ``prepare`` part's costliest functions on stderr)."""
    took: dict[str, float] = {}
    t = time.monotonic()
    import torch

    torch.set_num_threads(threads)
    took["torch"] = time.monotonic() - t
    t = time.monotonic()
    import runners.api
    import runners.rank.serve  # noqa: F401
    from runners.fork.forkimports import import_modules
    from runners.fork.forkparent import ALWAYS

    import_modules(ALWAYS)

    took["harness"] = time.monotonic() - t
    t = time.monotonic()
    for name in preload:
        __import__(name)
    took["preload"] = time.monotonic() - t
    from runners.workloads.loader import prepare_workload

    prof = cProfile.Profile() if top else None
    t = time.monotonic()
    if prof:
        prof.enable()
    if not prepare_workload(EXAMPLE, ref, params):
        raise SystemExit(f"fork_start: {ref} has no prepare()")
    took["prepare"] = time.monotonic() - t
    if prof:
        prof.disable()
        # To stderr: the parent shows it; stdout carries the JSON row.
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(top)
    return took


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="h200")
    ap.add_argument("--threads", default=f"1,{os.cpu_count() or 1}")
    ap.add_argument("--out", type=Path)
    ap.add_argument(
        "--top", type=int, default=0, help="Also print prepare's N costliest functions."
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    ref, preload, params = plan_of(a.profile)
    if a.child:
        print(json.dumps(child(ref, preload, params, int(a.child), a.top)))
        return
    rows = []
    for n in dict.fromkeys(int(x) for x in a.threads.split(",") if x):
        env = {**os.environ, "OMP_NUM_THREADS": str(n)}
        cmd = [sys.executable, "-m", "benchmarks.fork_start", "--profile", a.profile]
        cmd += ["--top", str(a.top)]
        got = subprocess.run(
            [*cmd, "--child", str(n)], env=env, cwd=ROOT, capture_output=True, text=True
        )
        if got.returncode != 0:
            raise SystemExit(f"fork_start: {n} thread(s): {got.stderr.strip()[-400:]}")
        took = json.loads(got.stdout.strip().splitlines()[-1])
        if a.top:
            print(got.stderr, flush=True)
        rows.append({"threads": n, **{k: round(took[k], 3) for k in PARTS}})
        print(
            f"{n:3d} thread(s): "
            + ", ".join(f"{k} {took[k]:.1f} s" for k in PARTS)
            + f"; whole {sum(took.values()):.1f} s",
            flush=True,
        )
    if a.out:
        a.out.write_text(json.dumps({"profile": a.profile, "params": params, "rows": rows}))


if __name__ == "__main__":
    main()
