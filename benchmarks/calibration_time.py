"""What the built-in estimator's calibration adds to a workload's first run, before and after.

    python -m benchmarks.calibration_time --before DIR [--rounds N] [--out FILE]

``DIR`` is a checkout of the revision to compare with. For GPT-2 (the CPU size of
`benchmarks.estimator_accuracy`, its calibration budget) and the Qwen3-MoE LoRA
adapter example (``examples/qwen3_adapter``'s CPU plan, its estimator left out, so the
built-in one calibrates at its default budget), each round builds the workload in a
fresh interpreter of each checkout, in turn, and times one calibration measured afresh
(wall and CPU seconds, the steps it measured). Both sides run in the same rounds on
the same host, so a busy host slows both alike; the medians are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ledger.units.numbers import iec, number

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, os, sys, time, tomllib
import torch
import runners.adapt.calibrate as C
from runners.adapt.library import causal_lm
steps = [0]
measure = C.measure_step
def counted(*a, **k):
    steps[0] += 1
    return measure(*a, **k)
C.measure_step = counted
family = sys.argv[1]
if family == "gpt2":
    from benchmarks.estimator_accuracy import _families
    make = next(f for f in _families("cpu") if f["family"] == "gpt2")["make"]
    w = make()
else:
    with open(sys.argv[2], "rb") as f:
        params = tomllib.load(f)["workload_params"]
    params.pop("estimator", None)
    w = causal_lm(**params)
w.setup(torch.device("cpu"), 0)
wall, cpu = time.monotonic(), time.process_time()
cal = w.calibration(fresh=True)
print(json.dumps({
    "wall_s": time.monotonic() - wall,
    "cpu_s": time.process_time() - cpu,
    "steps": steps[0],
    "error_permille": {k: f.error_permille for k, f in sorted(cal.phases.items())},
    # Method 2 (a checkout before it) states no absolute part: 0 there.
    "error_bytes": {k: getattr(f, "error_bytes", 0) for k, f in sorted(cal.phases.items())},
}))
"""

FAMILIES = ("gpt2", "qwen3_moe+lora example")


def stated_error(error_bytes: int, error_permille: int) -> str:
    """A stated error as people read it: bytes in IEC units and a percent of the point,
    three significant digits each (the JSON keeps the exact integers)."""
    return f"{iec(error_bytes)} + {number(error_permille / 10)} %"


def _one(checkout: Path, family: str) -> dict[str, Any]:
    plan = ROOT / "examples" / "qwen3_adapter" / "qualification.toml"
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "PYTHONPATH": str(checkout), "LEDGER_CALIBRATION_DIR": cache}
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, family.split()[0], str(plan)],
            env=env,
            cwd=checkout,
            capture_output=True,
            text=True,
            check=True,
        )
    got: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return got


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True, help="A checkout to compare with.")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    sides = {"before": a.before.resolve(), "after": ROOT}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {f: {s: [] for s in sides} for f in FAMILIES}
    for r in range(a.rounds):
        for family in FAMILIES:
            for side, checkout in sides.items():
                got = _one(checkout, family)
                runs[family][side].append(got)
                errors = ", ".join(
                    f"{k} {stated_error(got['error_bytes'][k], v)}"
                    for k, v in got["error_permille"].items()
                )
                print(
                    f"round {r + 1} {family} {side}: {got['wall_s']:.1f} s wall, "
                    f"{got['cpu_s']:.1f} s CPU, {got['steps']} steps, "
                    f"stated error {errors}",
                    flush=True,
                )
    summary = {
        f: {
            s: {
                "median_wall_s": round(statistics.median(x["wall_s"] for x in got), 2),
                "median_cpu_s": round(statistics.median(x["cpu_s"] for x in got), 2),
                "steps": got[0]["steps"],
                "error_bytes": got[0]["error_bytes"],
                "error_permille": got[0]["error_permille"],
            }
            for s, got in by.items()
        }
        for f, by in runs.items()
    }
    print(json.dumps(summary, indent=1))
    if a.out is not None:
        a.out.write_text(json.dumps({"summary": summary, "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
