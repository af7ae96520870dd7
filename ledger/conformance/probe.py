"""Running `runners.doctor` on a checkout, sandboxed, and reading its report."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.evidence.errors import InputError, UsageError
from ledger.qualification.plan import ClaimSpec, Plan
from ledger.sandbox import Sandbox

if TYPE_CHECKING:
    from runners.fork.forkparent import ForkServer

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


def probe(
    root: Path,
    claims: list[dict[str, Any]],
    box: Sandbox,
    fork: ForkServer | None = None,
    work_root: Path | None = None,
) -> dict[str, Any]:
    """`runners.doctor` on the checkout at ``root`` under ``box``; its report, or
    `UsageError` when it wrote none. With ``fork`` (``root``'s fork server, ready and
    forking) the doctor is forked from it inside its sandbox, in a folder of
    ``work_root`` (the run's): the libraries are imported and the model built already
    (a copy, `runners.workloads.prebuilt`), where a fresh interpreter paid both again
    beside the server's own start."""
    from runners.contract.childenv import env as child_env
    from runners.fork.forkclient import REFUSED, STRICT_VAR, pids_env

    with tempfile.TemporaryDirectory(prefix="ledger-doctor-", dir=work_root) as tmp:
        work = Path(tmp)
        req, res = work / "request.json", work / "result.json"
        req.write_text(json.dumps({"root": str(root), "claims": claims}, default=str))
        # Ledger's folder, made after the fork server's sandbox started: the doctor
        # forked there runs as the sandbox's uid.
        box.hand_over(work)
        done = None
        if fork is not None and work_root is not None:
            from ledger.sandbox.claimpids import ClaimPids

            # The client runs here, outside the sandbox: refused, it runs nothing. Where
            # its server holds each process it forks to a pids cgroup of its own, the
            # doctor's is as a claim's alone on the server (the whole sandbox's limit).
            env = {**child_env(), STRICT_VAR: "1"}
            own = ClaimPids.make(fork.proc.pid, 1)
            if own is not None:
                env.update(pids_env(own.path, own.note))
            argv = fork.argv("runners.doctor", req, res)
            try:
                done = subprocess.run(argv, env=env, cwd=work, capture_output=True, text=True)
            finally:
                if own is not None:
                    own.close()
            if done.returncode == REFUSED:
                done = None
        if done is None:
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
