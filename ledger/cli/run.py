"""`ledger run -- CMD ...`: run a harness's command and sign one receipt about it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from ledger.cli._common import F, db_option, keydir, plan_option


def target_options(f: F) -> F:
    """--claim, --pr/--rev, --repo, --key, --unplanned, --plan, --server, --db: what a
    receipt is about and where it goes (shared with `ledger import`)."""
    for opt in reversed(
        (
            click.option("--claim", required=True, help="The claim the receipt is about."),
            click.option("--pr", type=click.IntRange(min=1), metavar="N", help="Pull request N."),
            click.option("--rev", metavar="REV", help="A commit, branch or tag."),
            click.option(
                "--repo",
                type=click.Path(file_okay=False, path_type=Path),
                help="Repository (default: the current one).",
            ),
            click.option("--key", "key_name", required=True, help="Runner key name."),
            click.option(
                "--unplanned", is_flag=True, help="Record a claim the governing plan does not name."
            ),
            plan_option,
            click.option("--server", metavar="URL", help="Record through a `ledger serve`."),
            db_option,
        )
    ):
        f = opt(f)
    return f


def _check_target(pr: int | None, rev: str | None) -> None:
    if (pr is None) == (rev is None):
        raise click.UsageError("give exactly one of --pr N or --rev R")


@click.command(context_settings={"ignore_unknown_options": True})
@target_options
@click.option(
    "--artifact",
    "artifacts",
    multiple=True,
    metavar="GLOB",
    help="Output files to digest and store after the run (repeatable; ** allowed).",
)
@click.option(
    "--result",
    "result_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="JSON result file the command writes (outcome, reason, measurements).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds before the command's process group is killed (infra-error).",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(
    claim: str,
    pr: int | None,
    rev: str | None,
    repo: Path | None,
    key_name: str,
    unplanned: bool,
    plan: Path | None,
    server: str | None,
    db: str | None,
    artifacts: Sequence[str],
    result_file: Path | None,
    timeout_s: float | None,
    command: Sequence[str],
) -> None:
    """Run COMMAND in its own process group and sign one receipt for --claim.

    Records the environment fingerprint, NVML device memory before and after,
    times, exit status, command line, digests of --artifact files and a cleanup
    proof (the process group gone; leaked children named). The outcome is the
    exit status's, or the --result file's. The command's output goes to stderr;
    stdout carries the receipt id. Put `--` before COMMAND.
    """
    from ledger.attest import attest
    from ledger.record import open_recorder
    from ledger.run import run_command

    _check_target(pr, rev)
    recorder = open_recorder(db, server)
    key = keydir().load(key_name)
    done = run_command(
        command, timeout_s=timeout_s, result_file=result_file, artifact_globs=artifacts
    )
    rec = attest(
        recorder,
        key,
        done.facts(claim),
        repo_path=repo,
        rev=rev,
        pr=pr,
        plan_file=plan,
        artifact_paths=done.artifacts,
        unplanned=unplanned,
    )
    note = "" if done.outcome == "passed" else f": {done.reason}"
    click.echo(f"{claim}: {done.outcome}{note}", err=True)
    click.echo(rec.recorded.id)


__all__: list[str] = ["run", "target_options"]
