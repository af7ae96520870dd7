"""Harness overhead: the same workload steps bare and under the harness, in one run.

A step is forward+backward+zero_grad at one shape, synchronised at its end.
"Harness" is what every measured check step pays with the observer off: the
probe session (CPU: the dispatch tracker), the reset-to-peak window (device
syncs and counter reads) and failure capture. Blocks of bare and harnessed
steps alternate after a warm-up of each, so drift hits both alike.

``python -m scripts.device.overhead --out FILE [--device cuda|cpu]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from runners.checks.context import load_preserving
from runners.contract.result import Json
from runners.harness.determinism import apply_determinism
from runners.harness.probe import make_probe
from runners.harness.registry import ResourceRegistry
from runners.harness.steps import measure_step
from runners.protocol import Shape
from scripts.device.common import PRESETS, REPO_ROOT, WORKLOAD, write_json


def measure_overhead(
    *,
    device: torch.device,
    workload_params: dict[str, Any],
    batch: int,
    seq: int,
    steps: int,
    rounds: int = 2,
    seed: int = 0,
    workload_ref: str = WORKLOAD,
    root: Path = REPO_ROOT,
) -> dict[str, Json]:
    """Per-step wall times (ns) bare and under the harness, and their difference."""
    applied = apply_determinism(seed=seed, warn_only=True)
    w = load_preserving(root, workload_ref, workload_params)
    probe = make_probe(device)
    cuda = device.type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    with probe.session():
        w.setup(device, seed)
    shape = Shape(batch=batch, seq=seq)
    with probe.session():
        batch_t = w.make_batch(shape, seed)

    def step() -> None:
        out = w.forward(batch_t, grad=True)
        w.backward(out)
        del out
        w.zero_grad()
        sync()

    bare: list[int] = []
    harnessed: list[int] = []
    # Warm-up: kernels, workspaces and the tracker's first-use imports on both paths.
    step()
    with probe.session():
        measure_step(probe, "warm-up", step)
    registry_ns: list[int] = []
    for _ in range(rounds):
        for _ in range(steps):
            t0 = time.perf_counter_ns()
            step()
            bare.append(time.perf_counter_ns() - t0)
        t_reg = time.perf_counter_ns()
        with probe.session(), ResourceRegistry(probe=probe):
            registry_ns.append(time.perf_counter_ns() - t_reg)
            for _ in range(steps):
                t0 = time.perf_counter_ns()
                rec = measure_step(probe, "step", step)
                harnessed.append(time.perf_counter_ns() - t0)
                if not rec.ok:
                    raise RuntimeError(rec.outcome.sentence())
    w.teardown()
    bare_med = int(statistics.median(bare))
    harness_med = int(statistics.median(harnessed))
    bare_sum, harness_sum = sum(bare), sum(harnessed)
    return {
        "device": str(device),
        "probe": probe.name,
        "observer": "off",
        "shape": str(shape),
        "steps_per_block": steps,
        "rounds": rounds,
        "bare_step_ns": [int(x) for x in bare],  # a list[Json]
        "harness_step_ns": [int(x) for x in harnessed],
        "bare_total_ns": bare_sum,
        "harness_total_ns": harness_sum,
        "bare_median_ns": bare_med,
        "harness_median_ns": harness_med,
        "overhead_median_ns": harness_med - bare_med,
        "overhead_total_ns": harness_sum - bare_sum,
        "overhead_ppm": (harness_sum - bare_sum) * 1_000_000 // bare_sum if bare_sum else None,
        "registry_enter_ns": [int(x) for x in registry_ns],
        "determinism": applied,
        "note": (
            "CPU: the harness includes the dispatch-mode storage tracker, which costs far "
            "more than CUDA's allocator counters"
            if not cuda
            else "CUDA: the harness adds device syncs and allocator counter reads per step"
        ),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.device.overhead")
    ap.add_argument("--out", type=Path, required=True, help="JSON file to write")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--size", choices=sorted(PRESETS), default="small")
    ap.add_argument("--steps", type=int, default=None)
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    preset = PRESETS[args.size]
    o = preset["overhead"]
    doc = measure_overhead(
        device=torch.device(args.device),
        workload_params=dict(preset["workload_params"]),
        batch=o["batch"],
        seq=o["seq"],
        steps=args.steps or o["steps"],
    )
    write_json(args.out, doc)
    print(
        f"overhead: median bare {doc['bare_median_ns']} ns, harness {doc['harness_median_ns']} ns"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
