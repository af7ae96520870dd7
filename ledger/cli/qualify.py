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
    rev_options,
    sandbox_option,
    server_option,
    verdict_exit,
)
from ledger.evidence.errors import EXIT_INFRA, EXIT_OK, UsageError

if TYPE_CHECKING:
    from ledger.execution.qualify import QualifyRun
    from ledger.qualification.report import StatusReport
    from ledger.read.handle import OpenLedger


def qualify_exit(ran: Sequence[tuple[str, str, str]], doc: dict[str, Any] | None) -> int:
    """The exit status of a qualify run, by the whole plan's verdict (`doc`: the one
    judge's answer, `ledger status --json`, here or from the server): 0 qualified, 3 not
    qualified only because of infrastructure (every blocker an infra-error), else 1.
    ``ran`` is this run's (receipt id, claim, outcome): a run that measured nothing
    (every check an infra-error) is never green, even on earlier evidence.
    ``doc`` None: the verdict could not be asked (the server was not reached), 3."""
    if doc is None:
        return EXIT_INFRA
    code = verdict_exit(doc)
    return EXIT_INFRA if code == EXIT_OK and nothing_measured(ran) else code


def nothing_measured(ran: Sequence[tuple[str, str, str]]) -> bool:
    """Every check this run ran ended in infra-error."""
    return bool(ran) and all(o == "infra-error" for _, _, o in ran)


def _headline(doc: dict[str, Any], subset: Sequence[str]) -> str:
    """The whole plan's verdict in one line, saying when only some claims ran now."""
    v = doc["verdict"]
    line = f"whole plan: {v['headline']}"
    if v["blockers"]:
        line += "; blocking: " + ", ".join(f"{c['claim']} ({c['state']})" for c in v["blockers"])
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
@server_option("Record through a `ledger serve` at URL instead of --db (its verdict decides).")
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
    after a --claim subset and through --server (the server's verdict, as `ledger
    status` asks it): exit 0 only when every required claim is qualified, 3 when
    only infrastructure blocks it (every blocker an infra-error) or the receipts
    wait in the outbox (`ledger push`), else 1.

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
    from ledger.read.handle import open_ledger

    _validate(executor, server, gpus)
    # Opened once: the receipts are recorded, and the fleet and the base read, through it.
    ledger = open_ledger(db, server)
    keys = keydir()
    # With Ray the workers sign, each with its own key: no key is read here.
    key = keys.load(key_name) if executor == "local" else None

    try:
        result = run_plan(
            ledger,
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
            secrets=[keys.path, *map(Path, ledger.private_paths())],
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
    code = _report(result, ledger, claims, server, as_json, progress)
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
    ledger: OpenLedger,
    claims: Sequence[str],
    server: str | None,
    as_json: bool,
    progress: Callable[[str], None],
) -> int:
    """The receipts and the whole plan's status rendered (or --json), the lines on
    stderr; the exit code, by the same judge `ledger status` asks (here, or the server)."""
    from ledger.read.render import render_qualify, render_status, terminal_width
    from ledger.write.record import LocalRecorder

    receipts = [{"id": i, "claim": c, "outcome": o} for i, c, o in result.receipts]
    report: StatusReport | None = None
    doc: dict[str, Any] | None = None
    unjudged = ""
    recorder = ledger.recorder
    if isinstance(recorder, LocalRecorder):
        from ledger.read.query import query_status

        # The PR's whole verdict, also when only some claims ran now.
        report = query_status(recorder.store, result.query(), claims=(), scope={})
        doc = report.to_json()
    elif ledger.kept:
        unjudged = "receipts wait in the outbox: the server holds no verdict on them yet"
    else:
        doc, unjudged = _server_verdict(server, result)
    subset = sorted(set(claims))
    if as_json:
        emit_json(
            {
                "receipts": receipts,
                "status": doc,
                "ran": subset or "all",
                "skipped": list(result.skipped),
                "baseline": [b.to_json() for b in result.baseline],
                # Decided before they started: this host cannot run them as asked.
                "not_run_here": [{"claim": c, "why": w} for c, w in result.not_here],
            }
        )
    elif report is not None:
        click.echo(render_qualify(receipts, report), nl=False)
    else:
        click.echo(render_qualify(receipts, None), nl=False)
        if doc is not None:
            click.echo("\n" + render_status(doc, width=terminal_width()), nl=False)
    if doc is not None:
        progress(_headline(doc, subset))
    code = qualify_exit(result.receipts, doc)
    kept(recorder)
    if doc is None:
        click.echo(f"ledger: not judged: {unjudged} (exit 3)", err=True)
    elif code == EXIT_INFRA and nothing_measured(result.receipts):
        # Qualified on earlier evidence alone, this run still measured nothing: never green.
        click.echo("ledger: nothing was measured: every check ended in infra-error", err=True)
    elif code == EXIT_INFRA:
        click.echo(
            "ledger: not qualified only because of infrastructure: "
            "every blocking claim is an infra-error (exit 3)",
            err=True,
        )
    return code


def _server_verdict(server: str | None, result: QualifyRun) -> tuple[dict[str, Any] | None, str]:
    """The server's whole-plan answer about what was just qualified (the judge
    `ledger status --server` asks), or why it could not be had."""
    from ledger.cli._common import open_reader
    from ledger.evidence.errors import Error

    try:
        return open_reader(None, server).status(result.query(), (), {}), ""
    except (Error, OSError) as e:
        return None, f"the server's verdict could not be read ({e})"
