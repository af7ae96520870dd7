"""Running `runners.doctor` on a checkout, sandboxed, and reading its report."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ledger.evidence.errors import InputError, UsageError
from ledger.qualification.plan import ClaimSpec, Plan
from ledger.sandbox import Sandbox

CANNOT = ("inconclusive", "broken")
"""Judgements that leave a claim without a verdict."""


def plan_claims(plan: Plan, claims: Sequence[ClaimSpec] | Sequence[str]) -> list[dict[str, Any]]:
    """The claims the doctor judges (all of the plan's when ``claims`` is empty), as
    `runners.doctor` takes them."""
    names = {c if isinstance(c, str) else c.name for c in claims}
    unknown = sorted(names - {c.name for c in plan.claims})
    if unknown:
        raise InputError(f"claims not in the plan: {', '.join(unknown)}")
    return [
        {
            "claim": c.name,
            "check": c.check,
            "params": dict(c.params),
            "workload": plan.workload_for(c) or "",
            "workload_params": dict(plan.workload_params_for(c)),
            "required": c.required,
        }
        for c in plan.claims
        if (not names or c.name in names) and plan.workload_for(c)
    ]


def probe(root: Path, claims: list[dict[str, Any]], box: Sandbox) -> dict[str, Any]:
    """`runners.doctor` on the checkout at ``root`` under ``box``; its report, or
    `UsageError` when it wrote none."""
    from runners.childenv import env as child_env

    with tempfile.TemporaryDirectory(prefix="ledger-doctor-") as tmp:
        work = Path(tmp)
        req, res = work / "request.json", work / "result.json"
        req.write_text(json.dumps({"root": str(root), "claims": claims}, default=str))
        policy = box.policy(read_only=[root], writable=[work], chdir=work, scratch=work)
        argv, env = box.launch(
            policy, [sys.executable, "-m", "runners.doctor", str(req), str(res)], child_env()
        )
        done = subprocess.run(argv, env=env, cwd=work, capture_output=True, text=True)
        if not res.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
            raise UsageError(f"the doctor's probe wrote no report: {' '.join(tail)}")
        report: dict[str, Any] = json.loads(res.read_text())
        return report


def cannot_judge(report: dict[str, Any], required_only: bool = False) -> list[dict[str, Any]]:
    """The claims the report says will get no verdict (required ones only, if asked)."""
    return [
        c
        for c in report["claims"]
        if c["judgement"] in CANNOT and (not required_only or c.get("required", True))
    ]
