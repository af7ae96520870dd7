"""`ledger doctor`: before any GPU time, what each claim of a plan will get from its
workload (judged, judged through a fallback, or inconclusive and why)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from ledger.cli._common import emit_json, json_option, plan_option, rev_options, sandbox_option
from ledger.evidence.errors import EXIT_NEGATIVE, UsageError


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
    # Imported here, not at the top: git and the plan models cost `ledger --help`
    # and every other command a fifth of a second at start-up.
    from ledger.conformance.probe import cannot_judge, plan_claims, probe
    from ledger.execution.trees import worktree
    from ledger.identity import source as src
    from ledger.plans import governing
    from ledger.qualification.plan import PLAN_FILE

    r = src.open_repo(repo)
    ident = governing.identify(r, rev=rev, pr=pr, plan_file=plan, offline=offline, base=base)
    if ident.plan is None:
        raise UsageError(f"no {PLAN_FILE} at {ident.revision.commit[:12]}; pass --plan FILE")
    gate = ident.plan
    if pr is not None and plan is None:
        from ledger.qualification.workload_source import workload_from

        # The head's workload definition is code under test, as qualify runs it; the
        # claims stay the base's.
        gate = workload_from(gate, governing.plan_at(r, ident.revision.commit, None))
    run_plan = gate if profile is None else gate.with_profile(profile)
    asked = plan_claims(run_plan, list(claims))
    click.echo(
        f"doctor: {ident.revision.commit[:12]} of {ident.revision.repo}: probing "
        f"{len(asked)} claim(s) on CPU",
        err=True,
    )
    from ledger.sandbox import resolve

    box = resolve(sandbox, allowed_env=run_plan.runner.env)
    with worktree(r, ident.revision.commit, "doctor") as root:
        report = probe(root, asked, box)
    if as_json:
        emit_json(report)
    else:
        for line in [*report["lines"], *report.get("notes", [])]:
            click.echo(line)
        click.echo(report["summary"])
    if cannot_judge(report):
        raise SystemExit(EXIT_NEGATIVE)
