"""Per-claim overhead of `ledger qualify`: fresh interpreters against the fork server,
each without and with the sandbox, and the fork server without and with its preload.

Runs the same claims, in one run, four ways through `run_claim_isolated` (what
`ledger qualify` calls per claim): each claim in a new interpreter that imports
torch, the harness and the workload's libraries (before), and each claim forked
from a server that imported them once (after; the server's one-time start is
printed and also spread over the claims); both again inside the sandbox
(bubblewrap: a sandboxed fork server, as `ledger qualify` runs by default, and a
sandbox per fresh interpreter, as a claim with a network or several ranks
runs). The overhead of a claim is its wall time less the check's own time (the
result's started..finished: the workload's setup and steps and the check around
them), i.e. process start, imports, request and result files, the outside
view's sampling, reaping and the exit proof. What the sandbox adds is the
difference of the medians, printed per way. The preload: a fork server that
imports only the workload's module (before) against one that also imports
what every check imports (``torch._dynamo``), the plan's ``preload`` list and
what the first claim imported, and prepares the workload once (``prepare()``:
the model built on CPU, copied by each claim); its saving shows in the wall
time (the check's own time includes the workload's setup).

    python benchmarks/qualify_overhead.py [--claims 5] [--workload qwen3|moe]
        [--size tiny|h200] [--device cpu|cuda] [--json] [--learned]

``--learned``: only the fork server's start and its first claim, for a tree run for
the first time and for the same tree again; what one run's claims learned to import
reaches only the next run of the same tree (`runners.fork.preload`).
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

import shutil  # noqa: E402
import tempfile  # noqa: E402

from ledger.execution.local_run import server_sandbox  # noqa: E402
from ledger.sandbox import Sandbox, resolve  # noqa: E402
from runners.claim.isolated import ClaimRequest, run_claim_isolated  # noqa: E402
from runners.contract.request import Claim  # noqa: E402
from runners.fork.forkparent import ForkServer  # noqa: E402
from runners.harness.child import env as child_env  # noqa: E402

WORKLOADS: dict[str, tuple[Path, str, dict[str, Any]]] = {
    "moe": (ROOT, "runners.workloads.moe:make_workload", {"d_model": 32, "n_layers": 1}),
    "qwen3": (ROOT / "examples" / "qwen3_moe", "qwen3_lora.workload:make_workload", {}),
}


def _claim(
    root: Path,
    ref: str,
    wparams: dict[str, Any],
    device: str,
    fork: Any,
    box: Sandbox | None = None,
    run_dir: Path | None = None,
) -> dict[str, Any]:
    t0 = time.perf_counter_ns()
    [r] = run_claim_isolated(
        ClaimRequest(
            Claim(
                claim="bench.cleanup",
                check="cleanup",
                params={"batch": 1, "seq": 16},
                workload_ref=ref,
                workload_params=wparams,
                device=device,
                observer_off=False,
            ),
            repo_root=root,
            base_root=None,
            artifact_dir=None,
            work_root=run_dir,
        ),
        progress=lambda _m: None,
        fork_server=fork,
        sandbox=box,
    )
    wall = time.perf_counter_ns() - t0
    inner = r.finished_ns - r.started_ns
    return {"outcome": r.outcome, "wall_s": wall / 1e9, "check_s": inner / 1e9,
            "overhead_s": (wall - inner) / 1e9}  # fmt: skip


def learned_effect(
    root: Path, ref: str, wparams: dict[str, Any], device: str, modules: list[str]
) -> dict[str, Any]:
    """The fork server's start and its first claim, for a tree qualified for the first
    time (the plan's list only: what another tree's claims learned is never imported)
    and for the same tree again (with what its first run's claims learned). Before the
    learned list was keyed by tree, every pull request's server started the second way."""
    from runners.fork.preload import installed_only, learned

    out: dict[str, Any] = {}
    extra: list[str] = []
    for way in ("new_tree", "same_tree_again"):
        preload = {"modules": [*modules, *extra], "prepare": [(str(root), ref, wparams)]}
        t0 = time.perf_counter()
        server = ForkServer.launch([(str(root), ref)], child_env(), **preload).wait()  # type: ignore[arg-type]
        start = time.perf_counter() - t0
        try:
            first = _claim(root, ref, wparams, device, server)
        finally:
            server.close()
        if way == "new_tree":
            extra = installed_only(learned(root))
        out[way] = {"fork_server_start_s": start, "first_claim_wall_s": first["wall_s"],
                    "modules_preloaded": len(server.ready.modules),
                    "outcome": first["outcome"]}  # fmt: skip
    out["learned_modules"] = len(extra)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--claims", type=int, default=5)
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="qwen3")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--size", choices=("tiny", "h200"), default="tiny")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--learned",
        action="store_true",
        help="Only the fork server's start and first claim, for a new tree and the same tree "
        "again (what a run learns reaches only runs of its own tree).",
    )
    a = ap.parse_args(argv)
    root, ref, wparams = WORKLOADS[a.workload]
    modules: list[str] = []
    if a.workload == "qwen3":
        import tomllib

        plan = tomllib.loads((root / "qualification.toml").read_text())
        modules = list(plan.get("preload", []))
        if a.size == "h200":
            wparams = {**plan["workload_params"], **plan["profiles"]["h200"]["workload_params"]}
    if a.learned:
        got = learned_effect(root, ref, wparams, a.device, modules)
        if a.json:
            print(json.dumps(got, indent=2))
        else:
            print(f"{ref} ({a.size}) on {a.device}: fork server start and its first claim")
            for way in ("new_tree", "same_tree_again"):
                x = got[way]
                print(f"  {way:16} server start {x['fork_server_start_s']:6.2f} s "
                      f"({x['modules_preloaded']} modules preloaded), first claim "
                      f"{x['first_claim_wall_s']:6.2f} s, {x['outcome']}")  # fmt: skip
            print(f"  learned by the first run's claim: {got['learned_modules']} module(s)")
        return got
    box = resolve("bwrap")
    run_dir = Path(tempfile.mkdtemp(prefix="ledger-bench-"))
    try:
        before = [_claim(root, ref, wparams, a.device, None) for _ in range(a.claims)]
        before_sb = [
            _claim(root, ref, wparams, a.device, None, box, run_dir) for _ in range(a.claims)
        ]
        t0 = time.perf_counter()
        bare = ForkServer.launch([(str(root), ref)], child_env(), learn=False).wait()
        bare_start_s = time.perf_counter() - t0
        try:
            after_bare = [_claim(root, ref, wparams, a.device, bare) for _ in range(a.claims)]
        finally:
            bare.close()
        preload = {"modules": modules, "prepare": [(str(root), ref, wparams)]}
        t0 = time.perf_counter()
        server = ForkServer.launch([(str(root), ref)], child_env(), **preload).wait()  # type: ignore[arg-type]
        start_s = time.perf_counter() - t0
        try:
            after = [_claim(root, ref, wparams, a.device, server) for _ in range(a.claims)]
        finally:
            server.close()
        t0 = time.perf_counter()
        wrap = server_sandbox(box, run_dir, [root])
        server_sb = ForkServer.launch(
            [(str(root), ref)],
            child_env(),
            wrap=wrap,
            sock_dir=run_dir,
            # As `ledger qualify` runs it: each claim confined to its own folder.
            confine={"run_dir": str(run_dir)},
            **preload,  # type: ignore[arg-type]
        ).wait()
        start_sb_s = time.perf_counter() - t0
        try:
            after_sb = [
                # As `ledger qualify` runs it: the sandbox named, whose uid the claim's
                # folder is handed to.
                _claim(root, ref, wparams, a.device, server_sb, box, run_dir)
                for _ in range(a.claims)
            ]
        finally:
            server_sb.close()
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
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
        "fork_server": server.ready.to_json(),
        "before": before,
        "after": after,
        "no_preload_fork_server_start_s": bare_start_s,
        "no_preload_median_wall_s": statistics.median(x["wall_s"] for x in after_bare),
        "no_preload_median_overhead_s": statistics.median(x["overhead_s"] for x in after_bare),
        "preload_saved_wall_s": statistics.median(x["wall_s"] for x in after_bare) - wall_a,
        "no_preload": after_bare,
        "size": a.size,
        "sandboxed_fork_server_start_s": start_sb_s,
        "sandbox_added_forked_s": statistics.median(x["overhead_s"] for x in after_sb) - med_a,
        "sandbox_added_fresh_s": statistics.median(x["overhead_s"] for x in before_sb) - med_b,
        "sandboxed_before": before_sb,
        "sandboxed_after": after_sb,
        "outcomes": sorted({x["outcome"] for x in before + after + before_sb + after_sb}),
    }
    if a.json:
        print(json.dumps(doc, indent=2))
    else:
        print(
            f"{ref} ({a.size}) on {a.device}, {a.claims} cleanup claims each way "
            "(seconds per claim)"
        )
        print(f"{'':34} {'median overhead':>16} {'median check':>13} {'median wall':>12}")
        ways = (
            ("before: fresh interpreter", before),
            ("before, sandboxed", before_sb),
            ("after: forked, no preload", after_bare),
            ("after: forked, preloaded", after),
            ("after, sandboxed (the default)", after_sb),
        )
        for name, rows in ways:
            o = statistics.median(x["overhead_s"] for x in rows)
            c = statistics.median(x["check_s"] for x in rows)
            w = statistics.median(x["wall_s"] for x in rows)
            print(f"{name:34} {o:16.3f} {c:13.3f} {w:12.3f}")
        print(
            f"preload (torch._dynamo, {', '.join(modules) or 'no plan list'}, what the first "
            f"claim imported, prepare()) saves {doc['preload_saved_wall_s']:+.3f} s of wall "
            f"per claim; its server starts in {start_s:.2f} s vs {bare_start_s:.2f} s bare"
        )
        print(
            f"sandbox adds per claim: forked {doc['sandbox_added_forked_s']:+.3f} s, "
            f"fresh interpreter {doc['sandbox_added_fresh_s']:+.3f} s (target: <= 0.5 s); "
            f"sandboxed fork server start (once): {start_sb_s:.2f} s"
        )
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
