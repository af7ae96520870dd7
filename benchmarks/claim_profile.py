"""Where one claim's seconds go: a plan's claim run in this process under cProfile.

The claim runs as a claim process would run it (`runners.api.run_claim`, the plan's
profile applied), without the fork server or the sandbox around it, so the figures
are the check's own. Each progress line is printed with the seconds since the
claim began, then the functions that took the most time (cumulative, and own).

    python -m benchmarks.claim_profile PLAN_DIR CLAIM[,CLAIM...] [--profile h200]
        [--device cuda] [--top 25] [--doctor]

The plan's ``preload`` modules are imported first (a fork server has them), so the
figures leave imports out.

``--doctor``: the doctor's probe of the plan's workload instead of a claim
(`runners.doctor.probe`, on CPU as `ledger doctor` runs it).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import tempfile
import time
from pathlib import Path
from typing import Any

from ledger.qualification.plan import load_plan


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan_dir", type=Path)
    ap.add_argument("claim", nargs="?", default="")
    ap.add_argument("--profile", default=None)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--doctor", action="store_true")
    a = ap.parse_args(argv)
    plan = load_plan(a.plan_dir / "qualification.toml")
    if a.profile:
        plan = plan.with_profile(a.profile)
    import importlib

    for module in plan.preload:
        importlib.import_module(module)
    if a.doctor:
        _one(a, plan, plan.claims[0])
    for name in a.claim.split(",") if a.claim and not a.doctor else []:
        _one(a, plan, next(c for c in plan.claims if c.name == name))


def _one(a: argparse.Namespace, plan: Any, spec: Any) -> None:
    ref, wparams = plan.workload_for(spec) or "", dict(plan.workload_params_for(spec))
    t0 = time.perf_counter()

    def say(msg: str) -> None:
        print(f"{time.perf_counter() - t0:8.2f}s  {msg}", flush=True)

    prof = cProfile.Profile()
    out: Any
    if a.doctor:
        from runners.doctor.probe import probe

        say(f"doctor probe of {ref}")
        prof.enable()
        out = probe(a.plan_dir.resolve(), ref, wparams)
        prof.disable()
        say(f"done: {sorted(out['capabilities'])}")
    else:
        from runners.api import run_claim

        say(f"{spec.name} ({spec.check}) on {a.device}")
        prof.enable()
        out = run_claim(
            claim=spec.name,
            check=spec.check,
            params=dict(spec.params),
            repo_root=a.plan_dir.resolve(),
            workload_ref=ref,
            workload_params=wparams,
            device=a.device,
            observer_off_required=spec.observer_off,
            base_root=None,
            progress=say,
            artifact_dir=Path(tempfile.mkdtemp(prefix="claim-profile-")),
        )
        prof.disable()
        say("done: " + ", ".join(f"{r.check} {r.outcome}" for r in out))
    for key in ("cumulative", "tottime"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(a.top)
        print(f"--- by {key} ---")
        print("\n".join(ln for ln in s.getvalue().splitlines() if ln.strip()))


if __name__ == "__main__":
    main()
