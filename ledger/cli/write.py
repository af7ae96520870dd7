"""Commands that write: `attest`, `record`, `review`, `supersede`, `revoke` (`qualify`: its own
module)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import click

from ledger.cli._common import (
    db_option,
    emit_json,
    json_option,
    kept,
    keydir,
    load_json_file,
    open_reader,
    open_store,
    parse_scope,
    plan_option,
    read_file,
    rev_options,
    server_option,
)
from ledger.evidence.errors import EXIT_INFRA, InputError, UsageError

if TYPE_CHECKING:
    from ledger.evidence.statement import Facts
    from ledger.read.reader import Reader
    from ledger.write.attest import Attested
    from ledger.write.record import Recorder


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
@server_option("Record through a `ledger serve` at URL instead of --db.")
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
    from ledger.write.attest import attest as do_attest
    from ledger.write.record import open_recorder

    # The result exists already: with the server down it is signed and kept in
    # the outbox (`ledger push` delivers it), never lost.
    recorder = open_recorder(db, server, check_server=False)
    key = keydir().load(key_name)
    facts = _harness_facts(
        claim,
        outcome,
        reason,
        check_name,
        check_version,
        params,
        scope,
        measurements,
        observer,
        cleanup,
        host,
        gpu_uuids,
        started,
        finished,
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
    _said(done, recorder)


def _harness_facts(
    claim: str,
    outcome: str,
    reason: str | None,
    check_name: str | None,
    check_version: str,
    params: Sequence[str],
    scope: Sequence[str],
    measurements: Path | None,
    observer: str,
    cleanup: Path | None,
    host: str,
    gpu_uuids: Sequence[str],
    started: str | None,
    finished: str | None,
) -> Facts:
    """What the harness's options tell about its check, its files read and checked."""
    from ledger.evidence.statement import Facts
    from ledger.fleet.ci import ci_job
    from ledger.identity.environment import fingerprint
    from ledger.write.attest import rfc3339

    meas = load_json_file(measurements, "measurements") if measurements else {}
    if not isinstance(meas, dict):
        raise InputError("measurements file must hold a JSON object")
    clean = load_json_file(cleanup, "cleanup") if cleanup else None
    if clean is not None and not isinstance(clean, dict):
        raise InputError("cleanup file must hold a JSON object")
    return Facts(
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
        # The job that attests, whoever produced the result (`ledger.fleet.ci`).
        environment={**fingerprint(), **ci_job(os.environ)},
    )


def _said(done: Attested, recorder: Recorder) -> None:
    """The id on stdout; on stderr a dirty tree's warning and what the outbox keeps."""
    if done.revision.dirty:
        click.echo(
            "warning: the work tree is dirty; recorded as dirty (it will not qualify the commit)",
            err=True,
        )
    click.echo(done.recorded.id)
    if kept(recorder):
        raise SystemExit(EXIT_INFRA)


@click.command()
@click.argument(
    "envelopes", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path)
)
@db_option
@json_option
def record(envelopes: Sequence[Path], db: str | None, as_json: bool) -> None:
    """Verify and record signed envelopes (all or nothing)."""
    from ledger.write.ingest import record as do_record

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


@click.command()
@click.argument("receipt")
@click.option("--concur", is_flag=True, help="Agree with the receipt.")
@click.option("--dispute", is_flag=True, help="Dispute it: its claim stops qualifying.")
@click.option("--note", default="", help="What was checked, or why it is disputed.")
@click.option("--key", "key_name", required=True, help="Reviewer key name in $LEDGER_KEYS.")
@server_option("Record through a `ledger serve` at URL instead of --db.")
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
    from ledger.write.record import open_recorder
    from ledger.write.record import review as do_review

    if concur == dispute:
        raise UsageError("give exactly one of --concur or --dispute")
    recorder = open_recorder(db, server)
    key = keydir().load(key_name)
    verdict: Literal["concur", "dispute"] = "dispute" if dispute else "concur"
    rec = do_review(recorder, receipt, verdict, note, key)
    # The id alone for scripts; what was recorded, about what, for people.
    click.echo(rec.id)
    click.echo(_reviewed(rec.id, verdict, receipt, open_reader(db, server)), err=True)


def _reviewed(rid: str, verdict: str, ref: str, reader: Reader) -> str:
    """What a recorded review says: its verdict, the receipt and its claim."""
    from ledger.evidence.errors import Error
    from ledger.read.inert import inert

    try:
        shown = reader.show(ref)
        target = str(shown["id"])
        claim = shown["statement"]["predicate"].get("claim")
    except (Error, KeyError, TypeError):
        target, claim = ref, None
    about = f"receipt {target.removeprefix('sha256:')[:12]}" + (
        f" (claim {claim})" if claim else ""
    )
    effect = (
        "its claim stops qualifying on it while the dispute stands"
        if verdict == "dispute"
        else "it counts as independently reviewed"
    )
    return inert(f"recorded review {rid}: {verdict} of {about}; {effect}")


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
@server_option("Read and record through a `ledger serve` at URL instead of --db.")
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

    It says what it lifted and did not once recorded (with --dry-run, what it
    would, signing nothing): a counterexample is
    lifted only by its own signer, or once an independent reviewer concurs
    with the new receipt (until then: supersession pending review).
    """
    from ledger.read.inert import inert
    from ledger.write.record import open_recorder
    from ledger.write.supersede import plan_supersession
    from ledger.write.supersede import supersede as do_supersede

    key = keydir().load(key_name)
    shown = open_reader(db, server).show(receipt)
    planned = plan_supersession(shown, key, reason, "failed" if outcome == "failed" else "passed")
    if dry_run:
        click.echo(
            "dry run: nothing signed; " + inert(planned.describe("would")), err=True, nl=False
        )
        return
    new = do_supersede(open_recorder(db, server), key, planned)
    click.echo(new)
    # Said once it is signed and recorded, so in the past tense.
    click.echo(f"recorded {new}; " + inert(planned.describe("did")), err=True, nl=False)


@click.command()
@click.argument("receipt")
@click.option("--reason", required=True, help="Why the receipt no longer stands; logged.")
@click.option(
    "--review",
    metavar="ID",
    help="A counterexample's: an independent reviewer's review disputing it.",
)
@click.option(
    "--key",
    "key_name",
    metavar="NAME",
    help="Key in $LEDGER_KEYS that signs the revocation: the operator's ledger key"
    " (default on the ledger's host) or, with --server, the reviewer key of the dispute.",
)
@server_option("A `ledger serve` at URL instead of --db.")
@click.option("--token", metavar="TOKEN", help="With --server: its token (default: $LEDGER_TOKEN).")
@json_option
@db_option
def revoke(
    receipt: str,
    reason: str,
    review: str | None,
    key_name: str | None,
    server: str | None,
    token: str | None,
    as_json: bool,
    db: str | None,
) -> None:
    """Revoke RECEIPT: from its revocation on, it counts for nothing anywhere.

    The ledger's operator revokes on the ledger's host, or through --server with an
    operator token. A counterexample (a failed receipt) is revoked only on an
    independent review disputing it (--review), as its supersession would need. A
    reviewer token revokes only on its own dispute (--review), and a pass so only
    where the plan says so ([review] revoke_pass). Anything refused writes nothing.

    The revocation is signed by its authority's key (--key): it counts only where that
    signature verifies by a ledger key (the operator's word) or by the reviewer key
    that signed the dispute (a reviewer's).
    """
    key = keydir().load(key_name) if key_name else None
    if server:
        from ledger.remote.client import revoke_receipt as remote_revoke

        if key is None:
            raise UsageError("--server: the revocation is signed here: --key NAME")
        doc = remote_revoke(server, receipt, reason, review, key, token)
        doc = {k: doc.get(k) for k in ("receipt", "seq", "reason", "review", "by")}
    else:
        from ledger.write.revoke import revoke_receipt

        rev = revoke_receipt(open_store(db), receipt, reason, review, key=key)
        doc = {"receipt": rev.receipt, "seq": rev.seq, "reason": rev.reason, "review": rev.review}
    if as_json:
        emit_json(doc)
        return
    by = " (a reviewer's: a pass counts as revoked only where the plan says so)"
    click.echo(
        f"revoked {doc['receipt']} (seq {doc['seq']}): {reason}"
        + (by if doc.get("by") == "reviewer" else "")
    )
