"""The multi-rank plan through the multi-rank harness, without a ledger: results as JSON.

``python -m scripts.device.multirank --out DIR [--world N] [--device cuda|cpu]
[--claim NAME ...] [--grouped]``

Runs the claims of the example repository's multi-rank plan
(`scripts.example_plans.MULTI_RANK_PLAN`: the expert-parallel workload's
admission, 24-view regression, full-prefix backward and cleanup, and the mesh
handoff) on this checkout's expert-parallel workload, at ``--world`` ranks
(default: every visible GPU; 2 on CPU). ``--grouped`` keeps a process group
even at one rank, so the NCCL path runs on a single GPU. Writes
``results.json`` (every result) and ``summary.json``: per claim the outcome,
per rank the predicted vs measured peaks of admitted steps, the outside-pool
samples of the harness's process group (before init, after the first
collective, after destroy) and the mesh handoff's deltas, and wall times.
"""

from __future__ import annotations

import argparse
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from runners.claim.isolated import ClaimRequest, run_claim_isolated
from runners.contract.request import Claim
from runners.contract.result import Json, Stamped
from scripts.device.common import REPO_ROOT, Log, result_dict, write_json
from scripts.example_plans import MULTI_RANK_PLAN

EP = "runners.workloads.moe_ep:make_workload"


def _admission(rank: dict[str, Any]) -> dict[str, Json]:
    rows = [r for r in rank.get("shapes", []) if r.get("measured_bytes") is not None]
    admitted = [r for r in rows if r.get("admitted")]
    return {
        "admitted_steps": len(admitted),
        "refused_steps": rank.get("refused_count"),
        "max_measured_over_predicted": rank.get("max_measured_over_predicted"),
        "steps": [
            {
                "phase": r["phase"],
                "shape": r["shape"],
                "run": r["run"],
                "rank_predicted_bytes": r.get("rank_predicted_bytes", r.get("predicted_bytes")),
                "agreed_predicted_bytes": r.get("predicted_bytes"),
                "measured_bytes": r["measured_bytes"],
                "ballast_bytes": r.get("ballast_bytes"),
            }
            for r in admitted
        ],
    }


def _summary(r: Stamped, wall_s: float) -> dict[str, Json]:
    ranks = r.measurements.get("ranks")
    per_rank: list[Json] = []
    for m in ranks if isinstance(ranks, list) else []:
        assert isinstance(m, dict)
        entry: dict[str, Json] = {"rank": m.get("rank"), "process_group": m.get("process_group")}
        if r.check == "admission":
            entry["admission"] = _admission(m)
        if r.check == "mesh-handoff":
            entry["handoff"] = {k: v for k, v in m.items() if "delta" in k or "gpu_uuid" in k}
        per_rank.append(entry)
    return {
        "claim": r.claim,
        "check": r.check,
        "outcome": r.outcome,
        "reason": r.reason,
        "cleanup_complete": r.cleanup.complete,
        "not_released": [
            f"{x.kind} {x.id}: {x.proof}" for x in r.cleanup.resources if not x.released
        ],
        "scope": dict(r.scope),
        "wall_s": round(wall_s, 2),
        "ranks": per_rank,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.device.multirank")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--world", type=int, default=None)
    ap.add_argument("--claim", action="append", default=[])
    ap.add_argument("--grouped", action="store_true")
    args = ap.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out)
    world = args.world
    if world is None:
        import torch

        world = torch.cuda.device_count() if args.device == "cuda" else 2
    plan = tomllib.loads(MULTI_RANK_PLAN)
    claims = [c for c in plan["claims"] if not args.claim or c["name"] in args.claim]
    results: list[dict[str, Json]] = []
    summary: list[Json] = []
    t_all = time.monotonic()
    for c in claims:
        params = dict(c.get("params", {}))
        if c["check"] == "mesh-handoff":
            params["world_size"] = world
        t0 = time.monotonic()
        got = run_claim_isolated(
            ClaimRequest(
                Claim(
                    device=args.device,
                    claim=c["name"],
                    check=c["check"],
                    params=params,
                    workload_ref=EP,
                    workload_params=dict(plan.get("workload_params", {})),
                    observer_off=False,
                    world_size=world,
                    timeout_s=float(c.get("timeout_s", 600)),
                ),
                repo_root=REPO_ROOT,
                base_root=None,
                artifact_dir=out / "artifacts",
                distributed=True if args.grouped else None,
            ),
            progress=log,
        )
        wall = time.monotonic() - t0
        for r in got:
            why = "" if r.reason is None else f": {r.reason}"
            log(f"{r.claim}: {r.outcome} ({wall:.1f} s){why}")
            results.append(result_dict(r, out))
            summary.append(_summary(r, wall))
    write_json(out / "results.json", results)
    write_json(
        out / "summary.json",
        {"world_size": world, "wall_s": round(time.monotonic() - t_all, 2), "claims": summary},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
