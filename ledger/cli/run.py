"""`ledger run -- CMD ...`: run a harness's command and sign one receipt about it."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ledger.cli._common import (
    F,
    db_option,
    keydir,
    plan_option,
    recorder_paths,
    sandbox_option,
    server_option,
)
from ledger.evidence.errors import (
    EXIT_INFRA,
    EXIT_NEGATIVE,
    InputError,
    UsageError,
)

if TYPE_CHECKING:
    from ledger.evidence.statement import ArtifactFile, Facts
    from ledger.sandbox import Sandbox
    from ledger.write.attest import Target
    from ledger.write.run import CommandRun


def target_options(f: F) -> F:
    """--claim, --pr/--rev, --repo, --key, --unplanned, --plan, --server, --db,
    --offline: what a receipt is about and where it goes (shared with `ledger import`)."""
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
            server_option("Record through a `ledger serve`."),
            db_option,
            click.option(
                "--offline",
                is_flag=True,
                help="Do not fetch: --pr N is the PR head as the local refs hold it.",
            ),
        )
    ):
        f = opt(f)
    return f


def _check_target(pr: int | None, rev: str | None) -> None:
    if (pr is None) == (rev is None):
        raise click.UsageError("give exactly one of --pr N or --rev R")


def _folders(paths: Sequence[str]) -> list[Path]:
    """The folder each absolute path or glob is read beneath (`ledger.outputs.declared`:
    the nearest real folder above it); relative ones are in the worktree."""
    from ledger.outputs.declared import declare

    out: list[Path] = []
    for p in paths:
        if not p.startswith("/"):
            continue
        head = declare(p, None).folder
        if head != head.parent and head not in out:
            out.append(head)
    return out


def exit_for(outcomes: Sequence[str]) -> None:
    """Exit as the receipts say: 0 all passed, 3 when every one that did not pass is an
    infra-error (the code was not judged: the one status a CI retry policy retries),
    else 1 (a failure, an inconclusive or refused result: a CI step must not turn green
    on them, and a retry must not wash them out)."""
    bad = [o for o in outcomes if o != "passed"]
    if not bad:
        return
    raise SystemExit(EXIT_INFRA if all(o == "infra-error" for o in bad) else EXIT_NEGATIVE)


# Unknown options are refused, not taken as the command: the command comes after `--`.
@click.command()
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
    help="Seconds before the command's process group is killed (failed).",
)
@sandbox_option
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
    offline: bool,
    timeout_s: float | None,
    sandbox: str,
    command: Sequence[str],
) -> None:
    """Run COMMAND in a fresh checkout of --rev/--pr and sign one receipt for --claim.

    Every input (claim, plan, PR, key, options) is checked before the command
    starts. The command runs in its own process group, in a temporary worktree
    of the commit (the caller's work tree never enters); relative --artifact
    globs and --result are read there before it is removed. Records the
    environment fingerprint (Python and packages: the `python` on the command's
    PATH), NVML device memory before and after, times, exit status, command
    line, --artifact digests and a cleanup proof. The outcome is the exit
    status's, or the --result file's. The command's output goes to stderr;
    stdout carries the receipt id. Exits 0 passed, 1 failed, inconclusive or
    refused, 3 infra-error. The command is the pull request's code too: it runs
    sandboxed (--sandbox, docs/security.md), writing only its worktree and the
    --result folder (a folder of Ledger's bound there, copied out after: the
    command runs as an unprivileged uid, never the host's root). Put `--` before
    COMMAND.
    """
    from ledger.sandbox import resolve as resolve_sandbox
    from ledger.write.attest import record_all, target
    from ledger.write.record import open_recorder
    from ledger.write.run import CHECK

    _check_target(pr, rev)
    recorder = open_recorder(db, server)
    if artifacts and not recorder.stores_artifacts:
        raise UsageError("--artifact needs --db: a ledger server does not store artifact contents")
    key = keydir().load(key_name)
    tgt = target(
        [claim],
        repo_path=repo,
        rev=rev,
        pr=pr,
        plan_file=plan,
        unplanned=unplanned,
        offline=offline,
        fresh_checkout=True,
    )
    spec = tgt.specs[claim]
    if spec is not None and spec.check != CHECK:
        raise InputError(
            f"plan claim {claim} is checked by {spec.check!r}, not {CHECK!r}; nothing run"
        )
    keys = keydir()
    plan_of = tgt.identity.plan
    box = resolve_sandbox(
        sandbox,
        allowed_env=plan_of.runner.env if plan_of is not None else (),
        hide=[keys.path, *recorder_paths(recorder)],
    )
    network = spec is not None and spec.network
    done, files = _run_in_checkout(
        tgt, repo, box, network, command, timeout_s, result_file, artifacts
    )
    facts = _facts(done, claim, box, network)
    [rec] = record_all(recorder, key, tgt, [facts], artifact_files=files)
    note = "" if done.outcome == "passed" else f": {done.reason}"
    click.echo(f"{claim}: {done.outcome}{note}", err=True)
    click.echo(rec.id)
    exit_for([done.outcome])


def _facts(done: CommandRun, claim: str, box: Sandbox, network: bool) -> Facts:
    """What the run tells about the claim, with the sandbox's facet and the network in
    its scope; the host's own observations of the sandbox (its self-test, policy, uid)
    and the CI job this run is part of (`ledger.fleet.ci`) in its environment."""
    from ledger.fleet.ci import ci_job

    facts = done.facts(claim)
    scope = {**facts.scope, "sandbox": box.facet, "network": "on" if network else "off"}
    environment = {**facts.environment, **box.facts(), **ci_job(os.environ)}
    return dataclasses.replace(facts, scope=scope, environment=environment)


def _run_in_checkout(
    tgt: Target,
    repo: Path | None,
    box: Sandbox,
    network: bool,
    command: Sequence[str],
    timeout_s: float | None,
    result_file: Path | None,
    artifacts: Sequence[str],
) -> tuple[CommandRun, list[ArtifactFile]]:
    """The command run in the sandbox, in a temporary worktree of the target's commit;
    its run and the files it declared, read before the worktree goes."""
    from ledger.execution.trees import worktree
    from ledger.identity import source
    from ledger.write.run import MARKER, run_command

    with (
        worktree(source.open_repo(repo), tgt.revision.commit, "run") as root,
        tempfile.TemporaryDirectory(prefix="ledger-run-scratch-") as scratch,
    ):
        # What the command is declared to write: its worktree, the --result folder and
        # the folders of absolute --artifact globs. Those a user named are never handed
        # to the sandbox's uid: the command writes a folder of Ledger's bound at the same
        # path, and what it wrote there is copied out once it ended.
        declared = [str(result_file)] if result_file is not None else []
        named = _folders([*declared, *artifacts])
        staged = {f: Path(scratch) / f"out{i}" for i, f in enumerate(named)}
        for folder in staged.values():
            folder.mkdir()
        Path(scratch, "home").mkdir()

        def wrap(argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
            # The run's marker (a random id, no secret) names its processes.
            marker = {MARKER: env[MARKER]}
            policy = box.policy(
                writable=[root],
                network=network,
                scratch=Path(scratch, "home"),
                env=marker,
                mapped=[(mine, theirs) for theirs, mine in staged.items()],
            )
            return box.launch(policy, argv, env)

        sandboxed = box.mode != "none"
        done = run_command(
            command,
            timeout_s=timeout_s,
            result_file=result_file,
            artifact_globs=artifacts,
            cwd=root,
            sandbox=wrap if sandboxed else None,
            staged=staged if sandboxed else None,
            hidden=box.base.hidden,
        )
        # Read before the worktree goes (beneath their folders, never through a link):
        # the receipt names them, the store keeps them.
        files = done.files
    return done, files


__all__: list[str] = ["exit_for", "run", "target_options"]
