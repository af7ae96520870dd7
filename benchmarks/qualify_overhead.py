"""Per-claim overhead of `ledger qualify`: fresh interpreters against the fork server.

Runs the same claims, in one run, both ways through `run_claim_isolated` (what
`ledger qualify` calls per claim): each claim in a new interpreter that imports
torch, the harness and the workload's libraries (before), and each claim forked
from a server that imported them once (after; the server's one-time start is
printed and also spread over the claims). The overhead of a claim is its wall
time less the check's own time (the result's started..finished: the workload's
setup and steps and the check around them), i.e. process start, imports,
request and result files, reaping and the exit proof.

    python benchmarks/qualify_overhead.py [--claims 5] [--workload qwen3|moe] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runners.forkserver import ForkServer  # noqa: E402
from runners.harness.child import env as child_env  # noqa: E402
from runners.isolated import run_claim_isolated  # noqa: E402

WORKLOADS: dict[str, tuple[Path, str, dict[str, Any]]] = {
    "moe": (ROOT, "runners.workloads.moe:make_workload", {"d_model": 32, "n_layers": 1}),
    "qwen3": (ROOT / "examples" / "qwen3_moe", "qwen3_lora.workload:make_workload", {}),
}


def _claim(root: Path, ref: str, wparams: dict[str, Any], device: str, fork: Any) -> dict[str, Any]:
    t0 = time.perf_counter_ns()
    [r] = run_claim_isolated(
        claim="bench.cleanup",
        check="cleanup",
        params={"batch": 1, "seq": 16},
        repo_root=root,
        workload_ref=ref,
        workload_params=wparams,
        device=device,
        observer_off_required=False,
        base_root=None,
        progress=lambda _m: None,
        artifact_dir=None,
        fork_server=fork,
    )
    wall = time.perf_counter_ns() - t0
    inner = r.finished_ns - r.started_ns
    return {"outcome": r.outcome, "wall_s": wall / 1e9, "check_s": inner / 1e9,
            "overhead_s": (wall - inner) / 1e9}  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--claims", type=int, default=5)
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="qwen3")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    root, ref, wparams = WORKLOADS[a.workload]
    before = [_claim(root, ref, wparams, a.device, None) for _ in range(a.claims)]
    t0 = time.perf_counter()
    server = ForkServer.start([(str(root), ref)], child_env())
    start_s = time.perf_counter() - t0
    try:
        after = [_claim(root, ref, wparams, a.device, server) for _ in range(a.claims)]
    finally:
        server.close()
    med_b = statistics.median(x["overhead_s"] for x in before)
    wall_b = statistics.median(x["wall_s"] for x in before)
    wall_a = statistics.median(x["wall_s"] for x in after)
    med_a = statistics.median(x["overhead_s"] for x in after)
    doc = {
        "workload": ref,
        "device": a.device,
        "claims": a.claims,
        "before_median_overhead_s": med_b,
        "after_median_overhead_s": med_a,
        "before_median_wall_s": wall_b,
        "after_median_wall_s": wall_a,
        "fork_server_start_s": start_s,
        "after_amortised_overhead_s": med_a + start_s / a.claims,
        "fork_server": server.ready,
        "before": before,
        "after": after,
        "outcomes": sorted({x["outcome"] for x in before + after}),
    }
    if a.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"{ref} on {a.device}, {a.claims} cleanup claims each way (seconds per claim)")
        print(f"{'':28} {'median overhead':>16} {'median check':>13} {'median wall':>12}")
        for name, rows in (("before: fresh interpreter", before), ("after: forked", after)):
            o = statistics.median(x["overhead_s"] for x in rows)
            c = statistics.median(x["check_s"] for x in rows)
            w = statistics.median(x["wall_s"] for x in rows)
            print(f"{name:28} {o:16.2f} {c:13.2f} {w:12.2f}")
        print(
            "(the check's time includes loading the workload: before, its libraries' "
            "imports; after, already imported)"
        )
        print(f"fork server start (once): {start_s:.2f} s; after, amortised over "
              f"{a.claims} claims: {doc['after_amortised_overhead_s']:.2f} s")  # fmt: skip
        print(f"outcomes: {', '.join(doc['outcomes'])}")
    return doc


if __name__ == "__main__":
    main()
