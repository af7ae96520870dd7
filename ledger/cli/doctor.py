"""`ledger doctor`: before any GPU time, what each claim of a plan will get from its
workload (judged, judged through a fallback, or inconclusive and why)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from ledger import source as src
from ledger.cli._common import emit_json, json_option, plan_option, rev_options, sandbox_option
from ledger.errors import EXIT_NEGATIVE, InputError, UsageError
from ledger.qualification.plan import PLAN_FILE, Plan

CANNOT = ("inconclusive", "broken")
"""Judgements that leave a claim without a verdict."""


def plan_claims(plan: Plan, names: Sequence[str]) -> list[dict[str, Any]]:
    """The claims the doctor probes, as `runners.doctor` takes them."""
    unknown = sorted(set(names) - {c.name for c in plan.claims})
    if unknown:
        raise InputError(f"claims not in the plan: {', '.join(unknown)}")
    return [
        {
            "claim": c.name,
            "check": c.check,
            "params": dict(c.params),
            "workload": plan.workload_for(c) or "",
            "workload_params": dict(plan.workload_params_for(c)),
        }
        for c in plan.claims
        if (not names or c.name in names) and plan.workload_for(c)
    ]


def diagnose(
    root: Path, claims: list[dict[str, Any]], sandbox: str, allowed_env: Sequence[str] = ()
) -> dict[str, Any]:
    """Run `runners.doctor` on the checkout at ``root`` (sandboxed as ``sandbox`` asks: the
    workload is the revision's code); its report, or `UsageError` when it wrote none."""
    from ledger.sandbox import resolve
    from runners.childenv import env as child_env

    with tempfile.TemporaryDirectory(prefix="ledger-doctor-") as tmp:
        work = Path(tmp)
        req, res = work / "request.json", work / "result.json"
        req.write_text(json.dumps({"root": str(root), "claims": claims}, default=str))
        box = resolve(sandbox, allowed_env=allowed_env)
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


def cannot_judge(report: dict[str, Any]) -> list[str]:
    """The claims the report says will get no verdict."""
    return [str(c["claim"]) for c in report["claims"] if c["judgement"] in CANNOT]


@click.command()
@rev_options
@plan_option
@click.option("--claim", "claims", multiple=True, metavar="NAME", help="Only these claims.")
@click.option("--profile", metavar="NAME", help="Apply the plan's [profiles.NAME].")
@sandbox_option
@json_option
def doctor(
    pr: int | None,
    rev: str | None,
    base: str | None,
    offline: bool,
    repo: Path | None,
    plan: Path | None,
    claims: Sequence[str],
    profile: str | None,
    sandbox: str,
    as_json: bool,
) -> None:
    """Probe the plan's workload at a tiny shape on CPU, before any GPU time.

    Exercises each capability the plan's checks use (setup, steps, estimate, a
    reference precision, routing, replay) and prints per claim: judged, judged
    through a fallback (which), or will be inconclusive (why, and the line to
    add). Exit 0 when every claim can be judged, 1 when one cannot.
    """
    if rev is None and pr is None:
        raise UsageError("give --rev REV or --pr N")
    from ledger.execution.trees import worktree

    r = src.open_repo(repo)
    ident = src.identify(r, rev=rev, pr=pr, plan_file=plan, offline=offline, base=base)
    if ident.plan is None:
        raise InputError(f"no {PLAN_FILE} at {ident.revision.commit[:12]}; pass --plan FILE")
    run_plan = ident.plan if profile is None else ident.plan.with_profile(profile)
    asked = plan_claims(run_plan, claims)
    click.echo(
        f"doctor: {ident.revision.commit[:12]} of {ident.revision.repo}: probing "
        f"{len(asked)} claim(s) on CPU",
        err=True,
    )
    with worktree(r, ident.revision.commit, "doctor") as root:
        report = diagnose(root, asked, sandbox, list(run_plan.runner.env))
    if as_json:
        emit_json(report)
    else:
        for line in report["lines"]:
            click.echo(line)
        click.echo(report["summary"])
    if cannot_judge(report):
        raise SystemExit(EXIT_NEGATIVE)
