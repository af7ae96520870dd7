"""Commands that write: `attest`, `record`, `review`, `qualify`."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from ledger.cli._common import (
    F,
    db_option,
    emit_json,
    json_option,
    keydir,
    load_json_file,
    open_store,
    parse_scope,
    plan_option,
    read_file,
    recorder_paths,
    rev_options,
    sandbox_option,
)
from ledger.errors import EXIT_NEGATIVE, InputError, UsageError


def _server_option(help_text: str) -> Callable[[F], F]:
    return click.option("--server", metavar="URL", help=help_text)


@click.command()
@click.option("--claim", required=True, help="What is asserted, e.g. admission.no-oom-after-admit.")
@rev_options
@click.option(
    "--outcome",
    type=click.Choice(["passed", "failed", "inconclusive", "refused", "infra-error"]),
    required=True,
)
@click.option("--reason", help="Required for anything but passed: one sentence.")
@click.option("--check", "check_name", help="Check name (default: the plan's check for the claim).")
@click.option("--check-version", default="1", show_default=True)
@click.option(
    "--param", "params", multiple=True, metavar="K=V", help="Check parameter (repeatable)."
)
@click.option(
    "--scope",
    "scope",
    multiple=True,
    metavar="K=V",
    help="Scope facet (repeatable): device_kind=cuda, gpu_model=..., dtype=...",
)
@click.option(
    "--measurements",
    type=click.Path(dir_okay=False, path_type=Path),
    help="JSON object of measurements (bytes and ns as integers).",
)
@click.option(
    "--artifact",
    "artifacts",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="File to store content-addressed and reference (repeatable).",
)
@click.option("--observer", type=click.Choice(["on", "off"]), default="off", show_default=True)
@click.option(
    "--cleanup",
    type=click.Path(dir_okay=False, path_type=Path),
    help='JSON {"complete": bool, "resources": [{"kind","id","released","proof"}]}.',
)
@click.option(
    "--supersedes",
    "supersedes",
    multiple=True,
    metavar="ID",
    help="Receipt this one replaces (needs --supersedes-reason).",
)
@click.option("--supersedes-reason", help="Why the superseded receipts no longer stand.")
@click.option("--host", default="", help="Host the check ran on.")
@click.option("--gpu-uuid", "gpu_uuids", multiple=True, help="GPU it ran on (repeatable).")
@click.option("--started", metavar="TIME", help="When it started (RFC 3339).")
@click.option("--finished", metavar="TIME", help="When it finished (RFC 3339).")
@click.option("--unplanned", is_flag=True, help="Record a claim the governing plan does not name.")
@click.option(
    "--allow-dirty", is_flag=True, help="Record from a dirty work tree (recorded as dirty)."
)
@click.option("--key", "key_name", required=True, help="Runner key name in $LEDGER_KEYS.")
@plan_option
@_server_option("Record through a `ledger serve` at URL instead of --db.")
@db_option
def attest(
    claim: str,
    pr: int | None,
    rev: str | None,
    base: str | None,
    offline: bool,
    repo: Path | None,
    outcome: str,
    reason: str | None,
    check_name: str | None,
    check_version: str,
    params: Sequence[str],
    scope: Sequence[str],
    measurements: Path | None,
    artifacts: Sequence[Path],
    observer: str,
    cleanup: Path | None,
    supersedes: Sequence[str],
    supersedes_reason: str | None,
    host: str,
    gpu_uuids: Sequence[str],
    started: str | None,
    finished: str | None,
    unplanned: bool,
    allow_dirty: bool,
    key_name: str,
    plan: Path | None,
    server: str | None,
    db: str | None,
) -> None:
    """Sign and record a receipt from another harness's result.

    Commit, tree, parents, PR, merge-base, dirty flag and package identity are
    read from the repository; the rest comes from the options. Prints the id.
    """
    from ledger.attest import attest as do_attest
    from ledger.attest import rfc3339
    from ledger.environment import fingerprint
    from ledger.record import open_recorder
    from ledger.statement import Facts

    # The result exists already: with the server down it is signed and kept in
    # the outbox (`ledger push` delivers it), never lost.
    recorder = open_recorder(db, server, check_server=False)
    key = keydir().load(key_name)
    meas = load_json_file(measurements, "measurements") if measurements else {}
    if not isinstance(meas, dict):
        raise InputError("measurements file must hold a JSON object")
    clean = load_json_file(cleanup, "cleanup") if cleanup else None
    if clean is not None and not isinstance(clean, dict):
        raise InputError("cleanup file must hold a JSON object")
    facts = Facts(
        claim=claim,
        check=check_name or "",
        check_version=check_version,
        parameters=parse_scope(params),
        scope=parse_scope(scope),
        outcome=outcome,  # type: ignore[arg-type]
        reason=reason,
        measurements=meas,
        observer="on" if observer == "on" else "off",
        cleanup=clean,
        artifacts=[],
        supersedes=[],
        host=host,
        gpu_uuids=list(gpu_uuids),
        started=rfc3339(started, "--started") if started else None,
        finished=rfc3339(finished, "--finished") if finished else None,
        environment=fingerprint(),
    )
    done = do_attest(
        recorder,
        key,
        facts,
        repo_path=repo,
        rev=rev,
        pr=pr,
        plan_file=plan,
        artifact_paths=artifacts,
        supersedes=supersedes,
        supersedes_reason=supersedes_reason,
        unplanned=unplanned,
        allow_dirty=allow_dirty,
        offline=offline,
        base=base,
    )
    if done.revision.dirty:
        click.echo(
            "warning: the work tree is dirty; recorded as dirty (it will not qualify the commit)",
            err=True,
        )
    click.echo(done.recorded.id)
    _kept(recorder)


@click.command()
@click.argument(
    "envelopes", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path)
)
@db_option
@json_option
def record(envelopes: Sequence[Path], db: str | None, as_json: bool) -> None:
    """Verify and record signed envelopes (all or nothing)."""
    from ledger.ingest import record as do_record

    recs = do_record(open_store(db), [read_file(p) for p in envelopes])
    if as_json:
        emit_json([r.to_json() for r in recs])
        return
    for r in recs:
        click.echo(
            f"{r.id} already recorded (no change)"
            if r.duplicate
            else f"{r.id} recorded as entry {r.seq}"
        )


def _kept(recorder: object) -> None:
    """Exit 1 when receipts stayed in the outbox because the server could not take them."""
    kept = getattr(recorder, "kept", 0)
    if kept:
        click.echo(
            f"ledger: {kept} signed statement(s) kept in the outbox {recorder.outbox.path}"  # type: ignore[attr-defined]
            f" ({recorder.failure}); send them with `ledger push --server URL`",  # type: ignore[attr-defined]
            err=True,
        )
        raise SystemExit(EXIT_NEGATIVE)


@click.command()
@click.argument("receipt")
@click.option("--concur", is_flag=True, help="Agree with the receipt.")
@click.option("--dispute", is_flag=True, help="Dispute it: its claim stops qualifying.")
@click.option("--note", default="", help="What was checked, or why it is disputed.")
@click.option("--key", "key_name", required=True, help="Reviewer key name in $LEDGER_KEYS.")
@_server_option("Record through a `ledger serve` at URL instead of --db.")
@db_option
def review(
    receipt: str,
    concur: bool,
    dispute: bool,
    note: str,
    key_name: str,
    server: str | None,
    db: str | None,
) -> None:
    """Countersign (or dispute) a receipt with a reviewer key other than its signer."""
    from ledger.record import LocalRecorder, Recorder, open_recorder
    from ledger.record import review as do_review

    if concur == dispute:
        raise UsageError("give exactly one of --concur or --dispute")
    recorder: Recorder = open_recorder(db, server) if server else LocalRecorder(open_store(db))
    key = keydir().load(key_name)
    rec = do_review(recorder, receipt, "dispute" if dispute else "concur", note, key)
    click.echo(rec.id)


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
    "--key",
    "key_name",
    default="runner",
    show_default=True,
    help="Runner key name in $LEDGER_KEYS (with --executor ray: on each worker host).",
)
@_server_option("Record through a `ledger serve` at URL instead of --db (prints no status table).")
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
    """
    t0 = time.monotonic()

    def progress(msg: str) -> None:
        click.echo(f"{time.monotonic() - t0:7.1f}s  {msg}", err=True)

    from ledger.qualify import qualify as run_plan
    from ledger.record import LocalRecorder, open_recorder
    from ledger.render import render_qualify

    if executor == "ray" and not server:
        raise UsageError("--executor ray records through a ledger server: give --server URL")
    if gpus is not None:
        if executor != "local":
            raise UsageError(
                "--gpus places claims on this host's GPUs; with --executor ray, Ray does"
            )
        from ledger.execution.devices import parse_gpus

        parse_gpus(gpus)  # a bad list is refused before anything runs
    recorder = open_recorder(db, server)
    keys = keydir()
    # With Ray the workers sign, each with its own key: no key is read here.
    key = keys.load(key_name) if executor == "local" else None

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
    )
    receipts = [{"id": i, "claim": c, "outcome": o} for i, c, o in result.receipts]
    # Every check ending in infra-error measured nothing: an environment
    # failure (exit 2), never a verdict about the code.
    nothing_measured = bool(receipts) and all(o == "infra-error" for _, _, o in result.receipts)
    report = None
    if isinstance(recorder, LocalRecorder):
        from ledger.query import query_status

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
            }
        )
    else:
        click.echo(render_qualify(receipts, report), nl=False)
    if report is not None:
        progress(_headline(report, subset))
    if nothing_measured:
        raise UsageError("nothing was measured: every check ended in infra-error")
    _kept(recorder)
    if report is None:
        # A server client has only the receipts it just recorded, so it reports
        # those and leaves qualification to `ledger status` where the database is.
        click.echo(
            f"recorded at {server}; whether the claims qualify: `ledger status` on that ledger",
            err=True,
        )
        if any(o != "passed" for _, _, o in result.receipts):
            raise SystemExit(EXIT_NEGATIVE)
        return
    if not report.qualified:
        raise SystemExit(EXIT_NEGATIVE)


@click.command()
@click.argument("receipt")
@click.option("--reason", required=True, help="Why the receipt no longer stands.")
@click.option(
    "--outcome",
    type=click.Choice(["passed", "failed"]),
    default="passed",
    show_default=True,
    help="Outcome of the new receipt.",
)
@click.option("--key", "key_name", required=True, help="Runner key name in $LEDGER_KEYS.")
@click.option("--dry-run", is_flag=True, help="Say what it would do, and sign nothing.")
@_server_option("Read and record through a `ledger serve` at URL instead of --db.")
@db_option
def supersede(
    receipt: str,
    reason: str,
    outcome: str,
    key_name: str,
    dry_run: bool,
    server: str | None,
    db: str | None,
) -> None:
    """Replace RECEIPT with a new receipt of the same claim, scope and revision.

    Before signing it says what it will and will not lift: a counterexample is
    lifted only by its own signer, or once an independent reviewer concurs
    with the new receipt (until then: supersession pending review).
    """
    from ledger.inert import inert
    from ledger.record import open_recorder
    from ledger.supersede import plan_supersession
    from ledger.supersede import supersede as do_supersede

    key = keydir().load(key_name)
    if server:
        from ledger.client import fetch_entry

        shown = fetch_entry(server, receipt)
    else:
        from ledger.query import show_document

        shown = show_document(open_store(db), receipt)
    planned = plan_supersession(shown, key, reason, "failed" if outcome == "failed" else "passed")
    click.echo(inert(planned.describe()), err=True, nl=False)
    if dry_run:
        click.echo("dry run: nothing signed", err=True)
        return
    click.echo(do_supersede(open_recorder(db, server), key, planned))
