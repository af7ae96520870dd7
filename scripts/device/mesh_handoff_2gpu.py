"""The mesh-handoff check on 2 GPUs, both handoff modes, written as JSON.

``python -m scripts.device.mesh_handoff_2gpu --out DIR [--device cuda|cpu]
[--rows N --cols N --dtype bfloat16]``

Each mode is one check run (two NCCL ranks in child processes); both measure
memory outside the pool before and after the in-place handoff, the first and
second all-gather and destroy_process_group, per rank. ``results.json`` holds
the two `CheckResult` dicts; ``--device cpu`` runs the gloo functional path.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch

from runners.api import run_claim
from runners.contract.result import CheckResult
from runners.harness.fingerprint import fingerprint
from scripts.device.common import REPO_ROOT, WORKLOAD, Log, result_dict, write_json


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.device.mesh_handoff_2gpu")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args(argv)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out)
    if args.device == "cuda" and torch.cuda.device_count() < 2:
        log(f"needs 2 CUDA devices; {torch.cuda.device_count()} visible")
    device = torch.device(args.device)
    write_json(out / "environment.json", dataclasses.asdict(fingerprint(device)))
    results: list[CheckResult] = []
    for mode in ("keep", "gather"):
        log(f"== mesh-handoff mode={mode}")
        rs = run_claim(
            claim=f"mesh-handoff.{mode}-flat",
            check="mesh-handoff",
            params={"mode": mode, "rows": args.rows, "cols": args.cols, "dtype": args.dtype},
            repo_root=REPO_ROOT,
            workload_ref=WORKLOAD,
            workload_params={},
            device=args.device,
            observer_off_required=False,
            base_root=None,
            progress=log,
            artifact_dir=out / "artifacts",
        )
        for r in rs:
            log(f"-> {r.outcome}: {r.reason}")
            for k, v in sorted(r.measurements.items()):
                if k.endswith("_delta"):
                    log(f"   {k} = {v}")
        results.extend(rs)
        write_json(out / "results.json", [result_dict(r, out) for r in results])
    return 0 if all(r.outcome != "infra-error" for r in results) else 2


if __name__ == "__main__":
    sys.exit(main())
