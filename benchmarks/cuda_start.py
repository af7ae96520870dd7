"""What a fresh claim process pays to start CUDA, and what keeps the driver warm.

Every claim runs in a fresh process (`runners.claim.isolated`), so each pays the CUDA
driver's start: ``cuInit`` (torch's lazy init) and the primary context (the first
allocation). Without persistence mode the driver tears the GPU down when its last
client leaves and sets it up again for the next: that is the cost under test. Three
conditions, each ``--runs`` fresh processes started one after another:

- ``alone``: nothing else holds the GPU between processes (the baseline);
- ``nvml held``: this process holds an NVML session open meanwhile (as qualify's
  parent can: NVML allocates no GPU memory);
- ``context held``: another process holds a CUDA context meanwhile (costs GPU memory:
  shown for comparison only).

    python -m benchmarks.cuda_start [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = """
import json, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
torch.cuda.current_device()
t2 = time.perf_counter()
torch.zeros(1, device="cuda")
torch.cuda.synchronize()
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "init_s": t2 - t1, "context_s": t3 - t2}))
"""

HOLDER = """
import sys, torch
torch.zeros(1, device="cuda")
print("ready", flush=True)
sys.stdin.read()
"""


def _fresh(runs: int) -> list[dict[str, float]]:
    out = []
    for _ in range(runs):
        got = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True)
        if got.returncode != 0:
            raise SystemExit(f"the child failed: {got.stderr.strip().splitlines()[-1:]}")
        out.append(json.loads(got.stdout.strip().splitlines()[-1]))
    return out


def _line(name: str, got: list[dict[str, float]]) -> str:
    med = {k: statistics.median(g[k] for g in got) for k in got[0]}
    return (
        f"{name:<14} {med['import_s']:>9.2f} {med['init_s']:>9.2f} {med['context_s']:>10.2f}"
        f" {med['init_s'] + med['context_s']:>9.2f}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    rows = [("alone", _fresh(args.runs))]
    import pynvml

    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    rows.append(("nvml held", _fresh(args.runs)))
    pynvml.nvmlShutdown()
    del handles
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdin is not None
    holder.stdout.readline()
    rows.append(("context held", _fresh(args.runs)))
    holder.stdin.close()
    holder.wait()
    print(f"median of {args.runs} fresh processes, seconds")
    print(f"{'condition':<14} {'import':>9} {'cuInit':>9} {'context':>10} {'CUDA':>9}")
    for name, got in rows:
        print(_line(name, got))
    return 0


if __name__ == "__main__":
    sys.exit(main())
