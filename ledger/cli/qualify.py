"""`ledger qualify`: run a plan's checks on a revision, on this host or on Ray."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ledger.cli._common import (
    db_option,
    emit_json,
    json_option,
    kept,
    keydir,
    plan_option,
    recorder_paths,
    rev_options,
    sandbox_option,
    server_option,
)
from ledger.evidence.errors import EXIT_INFRA, EXIT_NEGATIVE, EXIT_OK, UsageError

if TYPE_CHECKING:
    from ledger.execution.qualify import QualifyRun
    from ledger.qualification.report import StatusReport
    from ledger.write.record import Recorder


def qualify_exit(ran: Sequence[tuple[str, str, str]], report: StatusReport | None) -> int:
    """The exit status of a qualify run: 0 qualified; 3 not qualified only because of
    infrastructure (every blocking claim has nothing but this run's infra-error
    receipts: the code was not judged, and a CI retry may run it again); else 1.

    ``ran`` is this run's (receipt id, claim, outcome); ``report`` the whole plan's
    status, None through a server (whose client judges only what it just recorded).
    """
    if report is None:
        bad = [o for _, _, o in ran if o != "passed"]
        if not bad:
            return EXIT_OK
        return EXIT_INFRA if all(o == "infra-error" for o in bad) else EXIT_NEGATIVE
    if report.qualified:
        return EXIT_OK
    if not report.governed or report.problems:
        return EXIT_NEGATIVE
    infra = {c for _, c, o in ran if o == "infra-error"}
    blocking = [
        c
        for c in report.claims
        if c.required and c.scope_role == "required" and c.state != "qualified"
    ]
    # Not run for want of evidence (or only an earlier head's), and this run's try
    # was an infra-error: a retry can qualify it. A failure, a dispute, a review
    # still owed or a claim this run did not try is a verdict no retry changes.
    only_infra = bool(blocking) and all(
        c.state in ("not-run", "stale") and c.claim in infra for c in blocking
    )
    return EXIT_INFRA if only_infra else EXIT_NEGATIVE


def _headline(report: Any, subset: Sequence[str]) -> str:
    """The whole plan's verdict in one line, saying when only some claims ran now."""
    from ledger.qualification.verdict import verdict_of

    v = verdict_of(report)
    line = f"whole plan: {v.headline}"
    if v.blockers:
        line += "; blocking: " + ", ".join(f"{c.claim} ({c.state})" for c in v.blockers)
    if subset:
        line += (
            f" (this run ran {len(subset)} claim(s): {', '.join(subset)}; "
            "the exit status follows the whole plan)"
        )
    return line


@click.command()
@rev_options
@plan_option
@click.option(
    "--claim",
    "claims",
    multiple=True,
    metavar="NAME",
    help="Run only these plan claims (repeatable).",
)
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default="auto",
    show_default=True,
    help="auto: CUDA when a GPU is present, else CPU.",
)
@click.option(
    "--profile",
    metavar="NAME",
    help="Apply the plan's [profiles.NAME] (recorded as the receipts' `profile` facet).",
)
@sandbox_option
@click.option(
    "--gpus",
    metavar="all|0,1,...",
    help="Run claims side by side, each on GPUs of its own (world_size of them; "
    "CUDA_VISIBLE_DEVICES per claim). Without a GPU the indices are logical devices.",
)
@click.option(
    "--executor",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="local: this host. ray: each claim a Ray task asking for world_size GPUs; "
    "workers sign with their own key and record through --server.",
)
@click.option("--ray-address", metavar="ADDR", help="The Ray cluster (default: RAY_ADDRESS).")
@click.option(
    "--no-baseline",
    is_flag=True,
    help="With --pr: do not judge the head's failing or inconclusive claims on the commit "
    "the PR branched from (by default a receipt of it on the same device is reused, "
    "else the claim runs there, and every surface says whose failure it is).",
)
@click.option(
    "--key",
    "key_name",
    default="runner",
    show_default=True,
    help="Runner key name in $LEDGER_KEYS (with --executor ray: on each worker host).",
)
@server_option("Record through a `ledger serve` at URL instead of --db (prints no status table).")
@db_option
@json_option
def qualify(
    pr: int | None,
    rev: str | None,
    base: str | None,
    offline: bool,
    repo: Path | None,
    plan: Path | None,
    claims: Sequence[str],
    device: str,
    profile: str | None,
    sandbox: str,
    gpus: str | None,
    executor: str,
    ray_address: str | None,
    no_baseline: bool,
    key_name: str,
    server: str | None,
    db: str | None,
    as_json: bool,
) -> None:
    """Run the plan's checks on a revision; record one signed receipt per check and scope.

    The revision is checked out into a temporary worktree (removed afterwards);
    plan and workload come from it. Progress goes to stderr; the receipt ids and
    the status table (or --json) to stdout. The status is the whole plan's, also
    after a --claim subset: exit 0 only when every required claim is qualified.

    With --pr, a claim that fails or is inconclusive on the head is judged on the
    commit the PR branched from, on the same device (a receipt of it reused, else
    run): the status labels it introduced here, failing on the base too, or
    failing only on one GPU. The label explains; it never unblocks.
    """
    t0 = time.monotonic()

    def progress(msg: str) -> None:
        click.echo(f"{time.monotonic() - t0:7.1f}s  {msg}", err=True)

    from ledger.execution.qualify import Interrupted
    from ledger.execution.qualify import qualify as run_plan
    from ledger.write.record import open_recorder

    _validate(executor, server, gpus)
    recorder = open_recorder(db, server)
    keys = keydir()
    # With Ray the workers sign, each with its own key: no key is read here.
    key = keys.load(key_name) if executor == "local" else None

    try:
        result = run_plan(
            recorder,
            key,
            repo_path=repo,
            rev=rev,
            pr=pr,
            plan_file=plan,
            claims=claims,
            device="cuda" if device == "cuda" else "cpu" if device == "cpu" else "auto",
            progress=progress,
            offline=offline,
            base=base,
            profile=profile,
            sandbox=sandbox,
            secrets=[keys.path, *map(Path, recorder_paths(recorder))],
            gpus=gpus,
            executor=executor,
            ray_address=ray_address,
            server=server,
            key_name=key_name,
            baseline=not no_baseline,
        )
    except Interrupted as e:
        # One line, after every claim process stopped: what the ledger holds now.
        click.echo(f"ledger: {e.line()}", err=True)
        raise SystemExit(130) from None
    code = _report(result, recorder, claims, server, as_json, progress)
    if code != EXIT_OK:
        raise SystemExit(code)


def _validate(executor: str, server: str | None, gpus: str | None) -> None:
    """The options refused before anything runs."""
    if executor == "ray" and not server:
        raise UsageError("--executor ray records through a ledger server: give --server URL")
    if gpus is not None:
        if executor != "local":
            raise UsageError(
                "--gpus places claims on this host's GPUs; with --executor ray, Ray does"
            )
        from ledger.execution.devices import parse_gpus

        parse_gpus(gpus)  # a bad list is refused before anything runs


def _report(
    result: QualifyRun,
    recorder: Recorder,
    claims: Sequence[str],
    server: str | None,
    as_json: bool,
    progress: Callable[[str], None],
) -> int:
    """The receipts and the status rendered (or --json), the lines on stderr; the exit code."""
    from ledger.read.render import render_qualify
    from ledger.write.record import LocalRecorder

    receipts = [{"id": i, "claim": c, "outcome": o} for i, c, o in result.receipts]
    # Every check ending in infra-error measured nothing: an environment
    # failure (exit 3), never a verdict about the code.
    nothing_measured = bool(receipts) and all(o == "infra-error" for _, _, o in result.receipts)
    report = None
    if isinstance(recorder, LocalRecorder):
        from ledger.read.query import query_status

        # The PR's whole verdict, also when only some claims ran now.
        report = query_status(recorder.store, result.query(), claims=(), scope={})
    subset = sorted(set(claims))
    if as_json:
        emit_json(
            {
                "receipts": receipts,
                "status": report.to_json() if report else None,
                "ran": subset or "all",
                "skipped": list(result.skipped),
                "baseline": [b.to_json() for b in result.baseline],
            }
        )
    else:
        click.echo(render_qualify(receipts, report), nl=False)
    if report is not None:
        progress(_headline(report, subset))
    code = qualify_exit(result.receipts, report)
    if nothing_measured:
        # Qualified on earlier evidence alone, this run still measured nothing: never green.
        code = EXIT_NEGATIVE if code == EXIT_NEGATIVE else EXIT_INFRA
        click.echo("ledger: nothing was measured: every check ended in infra-error", err=True)
    elif code == EXIT_INFRA:
        click.echo(
            "ledger: not qualified only because of infrastructure: "
            "every blocking claim's receipt here is an infra-error (exit 3)",
            err=True,
        )
    kept(recorder)
    if report is None:
        # A server client has only the receipts it just recorded, so it reports
        # those and leaves qualification to `ledger status` where the database is.
        click.echo(
            f"recorded at {server}; whether the claims qualify: `ledger status` on that ledger",
            err=True,
        )
    return code
