"""Run every check with the reference workload and write the results as JSON.

``python -m scripts.device.gpu_smoke --out DIR [--device cuda|cpu]
[--size tiny|small|medium] [--checks a,b,...] [--no-overhead]``

Writes into DIR: ``results.json`` (a list of `CheckResult` as
``dataclasses.asdict``, artifact paths relative to DIR), ``artifacts/``
(memory snapshots, event logs), ``environment.json`` (the fingerprint),
``overhead.json`` (bare vs harnessed step times, same run) and
``progress.log``. Admission and the 24-view regression run with the observer
on and their observer-off control; the other checks run observer-off. Exit 0
when every check produced a result (whatever its outcome), 2 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import traceback
from pathlib import Path

import torch

from runners.api import check_names, run_claim
from runners.contract.result import CheckResult, Json
from runners.harness.fingerprint import fingerprint
from scripts.device.common import (
    PRESETS,
    REPO_ROOT,
    WORKLOAD,
    Log,
    result_dict,
    write_json,
)
from scripts.device.overhead import measure_overhead

OBSERVED = ("admission", "regression-24view")
"""Checks run with the observer on plus their observer-off control."""

ORDER = (
    "cleanup",
    "regression-24view",
    "admission",
    "full-prefix-backward",
    "gradient-compare",
    "mesh-handoff",
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.device.gpu_smoke")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--size", choices=sorted(PRESETS), default="small")
    ap.add_argument("--checks", default=",".join(ORDER), help="comma-separated check names")
    ap.add_argument("--no-overhead", action="store_true")
    args = ap.parse_args(argv)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    artifacts = out / "artifacts"
    artifacts.mkdir(exist_ok=True)
    log = Log(out)
    checks = [c for c in args.checks.split(",") if c]
    unknown = sorted(set(checks) - set(check_names()))
    if unknown:
        print(f"unknown checks: {', '.join(unknown)}", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device (use --device cpu for a functional run)", file=sys.stderr)
        return 2
    preset = PRESETS[args.size]
    device = torch.device(args.device)
    write_json(out / "environment.json", dataclasses.asdict(fingerprint(device)))

    results: list[CheckResult] = []
    ok = True
    for name in checks:
        params: dict[str, Json] = dict(preset["checks"].get(name, {}))
        observed = name in OBSERVED
        if observed:
            params["observer"] = "on"
        t0 = time.monotonic()
        log(f"== {name} ({'observer on + control' if observed else 'observer off'})")
        try:
            rs = run_claim(
                claim=f"smoke.{name}",
                check=name,
                params=params,
                repo_root=REPO_ROOT,
                workload_ref=WORKLOAD,
                workload_params=dict(preset["workload_params"]),
                device=args.device,
                observer_off_required=observed,
                base_root=None,
                progress=log,
                artifact_dir=artifacts,
            )
        except Exception:
            ok = False
            log(f"!! {name} raised:\n{traceback.format_exc()}")
            continue
        for r in rs:
            note = "" if r.outcome == "passed" else f": {r.reason}"
            log(f"-> {r.check} [{r.observer}] {r.outcome}{note} ({time.monotonic() - t0:.1f} s)")
        results.extend(rs)
        # Written after every check, so a later crash keeps what finished.
        write_json(out / "results.json", [result_dict(r, out) for r in results])

    if not args.no_overhead:
        log("== harness overhead (observer off)")
        o = preset["overhead"]
        try:
            doc = measure_overhead(
                device=device,
                workload_params=dict(preset["workload_params"]),
                batch=o["batch"],
                seq=o["seq"],
                steps=o["steps"],
            )
            write_json(out / "overhead.json", doc)
            log(
                f"-> overhead: median step bare {doc['bare_median_ns']} ns, harness "
                f"{doc['harness_median_ns']} ns ({doc['overhead_ppm']} ppm in total)"
            )
        except Exception:
            ok = False
            log(f"!! overhead raised:\n{traceback.format_exc()}")
    write_json(out / "results.json", [result_dict(r, out) for r in results])
    return 0 if ok else 2


if __name__ == "__main__":
    raise SystemExit(main())
