"""What building once saves a workload without ``prepare()`` (`runners.workloads.prebuilt`).

The third party's Qwen3-MoE + LoRA trainer frozen at the earlier protocol
(tests/examples/frozen_protocol), in one process: ``setup(cpu, 0)`` as each claim
called it (before), against the fork server's one build plus a copy per setup (after).

    python -m benchmarks.prebuilt [--profile cpu|tiny|h200] [--setups 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
import tomllib
from pathlib import Path
from typing import Any

import torch

from runners.workloads import prebuilt
from runners.workloads.loader import load_workload, prebuild_workload

FROZEN = Path(__file__).resolve().parents[1] / "tests" / "examples" / "frozen_protocol"
CPU = torch.device("cpu")


def _params(profile: str) -> tuple[str, dict[str, Any]]:
    plan = tomllib.loads((FROZEN / "qualification.toml").read_text())
    extra = plan.get("profiles", {}).get(profile, {}).get("workload_params", {})
    return str(plan["workload"]), {**plan["workload_params"], **extra}


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--setups", type=int, default=3)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)  # as in a fork server and the claims it forks
    ref, params = _params(a.profile)
    warm = load_workload(FROZEN, ref, params)
    warm.setup(CPU, 1)  # its imports (transformers, peft) outside the figures
    warm.teardown()
    before = []
    for _ in range(a.setups):
        w = load_workload(FROZEN, ref, params)
        before.append(_timed(lambda w=w: w.setup(CPU, 0)))
        w.teardown()
    build = _timed(lambda: prebuild_workload(FROZEN, ref, params))
    after = []
    for _ in range(a.setups):
        w = load_workload(FROZEN, ref, params)
        after.append(_timed(lambda w=w: prebuilt.setup(w, CPU, 0)))
        w.teardown()
    route = prebuilt.routes()
    n = a.setups
    print(f"frozen-protocol Qwen3-MoE + LoRA, profile {a.profile}, {n} setups each way, CPU")
    print(f"{'':32s}{'median setup s':>16s}{'total s':>10s}")
    rows = [("before: setup per claim", before, 0.0), ("after: built once, copied", after, build)]
    for name, xs, once in rows:
        print(f"{name:32s}{statistics.median(xs):16.3f}{sum(xs) + once:10.3f}")
    print(f"one build in the fork server: {build:.3f} s; routes taken: {', '.join(route)}")
    print(f"saved over {n} setups: {sum(before) - sum(after) - build:+.3f} s")


if __name__ == "__main__":
    main()
