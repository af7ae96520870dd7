"""`ledger summary`: the status answer about a PR head as a signed SLSA verification summary."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ledger.cli._common import db_option, keydir, open_store, plan_option, rev_options
from ledger.evidence.errors import EXIT_NEGATIVE, UsageError

if TYPE_CHECKING:
    import git

__all__ = ["summary"]


def _plan_bytes(
    repo_path: Path | None, commit: str, base_commit: str | None, plan: Path | None
) -> bytes | None:
    """The governing plan's bytes, as `identify` chose it: --plan FILE, the base
    branch's (for a PR) or the commit's own."""
    from ledger.identity import source
    from ledger.qualification.plan import PLAN_FILE  # lazily: `ledger verify` never needs it

    if plan is not None:
        return plan.read_bytes()
    repo = source.open_repo(repo_path)
    try:
        blob = repo.commit(base_commit or commit).tree / PLAN_FILE
    except KeyError:
        return None
    return bytes(blob.data_stream.read())


@click.command()
@rev_options
@plan_option
@db_option
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the DSSE envelope here; `-o -`: stdout (the default off a terminal; "
    "on one, -o is required).",
)
def summary(
    pr: int | None,
    rev: str | None,
    base: str | None,
    offline: bool,
    repo: Path | None,
    plan: Path | None,
    db: str | None,
    output: Path | None,
) -> None:
    """Sign one SLSA verification summary (https://slsa.dev/verification_summary/v1)
    of `status` for --pr N's head (or --rev R), with the ledger key, in DSSE.

    subject: the head commit (digest gitCommit, annotations.sourceRefs
    refs/pull/N/head); resourceUri git+REPO; verificationResult PASSED when
    every required claim is qualified; verifiedLevels LEDGER_QUALIFIED_<claim>
    for each qualified claim; policy: the governing plan's sha256;
    inputAttestations: the receipts that qualify. Exits 1 when FAILED.

    Only the governing plan's verdict is signed: with --plan FILE other than the
    governing plan, an unsigned what-if ({"what_if": ..., "statement": ...}) is
    written instead and the exit status is 1.
    """
    from ledger.evidence import dsse
    from ledger.evidence.canonical import canonical_bytes
    from ledger.evidence.keys import active_ledger_key
    from ledger.identity import source
    from ledger.plans.governing import identify
    from ledger.read.query import query_status
    from ledger.read.standard import verification_summary

    to_stdout = _checked_output(pr, rev, output)
    gitrepo = source.open_repo(repo)
    ident = identify(gitrepo, rev=rev, pr=pr, plan_file=plan, offline=offline, base=base)
    store = open_store(db)
    info = active_ledger_key(store.keys())
    key = keydir().load(info.name)
    if key.keyid != info.keyid:
        raise UsageError(
            f"private key {info.name!r} does not match the ledger key {info.keyid[:12]}"
        )
    from ledger.qualification.plan import PLAN_FILE

    doc = query_status(store, ident, claims=None, scope={}).to_json()
    base_commit = _base_commit(gitrepo, base, pr, plan)
    text = _plan_bytes(repo, ident.revision.commit, base_commit, plan)
    governing = (
        None
        if pr is not None and base_commit is None
        else _plan_bytes(repo, ident.revision.commit, base_commit, None)
    )
    stmt = verification_summary(
        doc,
        plan_sha256=None if text is None else hashlib.sha256(text).hexdigest(),
        plan_uri=str(plan) if plan is not None else PLAN_FILE,
        verifier_id=f"urn:ledger-qualify:ledger-key:{info.keyid}",
    )
    if text is None and plan is None:
        # As `status`, `qualify` and `doctor` answer it: no plan, nothing to sign (exit 2).
        raise UsageError(
            f"no {PLAN_FILE} governs {ident.revision.commit[:12]}: pass --plan FILE for a what-if"
        )
    if text is None or text != governing:
        # Another plan than the governing one: what the answer would be under it, never
        # a signed verdict (a signed PASSED under a laxer plan would be a forgery).
        why = (
            f"--plan {plan} is not the governing plan ({PLAN_FILE} "
            + (f"at {(base_commit or ident.revision.commit)[:12]})" if governing else "none)")
            if plan is not None
            else f"no {PLAN_FILE} governs {ident.revision.commit[:12]}"
        )
        data = json.dumps({"what_if": f"unsigned: {why}", "statement": stmt}, indent=2) + "\n"
        _write(data, output, to_stdout)
        result = stmt["predicate"]["verificationResult"]
        click.echo(f"what-if, nothing signed: {result} under {plan}; {why}", err=True)
        raise SystemExit(EXIT_NEGATIVE)
    env = dsse.sign(canonical_bytes(stmt), key)
    data = json.dumps(env.model_dump(mode="json"), indent=2) + "\n"
    _write(data, output, to_stdout)
    result = stmt["predicate"]["verificationResult"]
    click.echo(f"{result}: {len(stmt['predicate']['verifiedLevels'])} claim(s) qualified", err=True)
    if result != "PASSED":
        raise SystemExit(EXIT_NEGATIVE)


def _checked_output(pr: int | None, rev: str | None, output: Path | None) -> bool:
    """The target and the output refused before anything is read; whether to stdout."""
    if (pr is None) == (rev is None):
        raise click.UsageError("give exactly one of --pr N or --rev R")
    import sys

    to_stdout = output is None or str(output) == "-"
    if output is None and sys.stdout.isatty():
        # A base64 payload on a terminal helps nobody; a file (or an explicit -o -) does.
        raise UsageError(
            "the summary is a signed DSSE envelope (JSON, base64 payload): "
            "write it with -o FILE (or -o - to print it here)"
        )
    if not to_stdout and output is not None and not output.absolute().parent.is_dir():
        raise UsageError(f"{output.parent}: no such directory")
    return to_stdout


def _base_commit(
    gitrepo: git.Repo, base: str | None, pr: int | None, plan: Path | None
) -> str | None:
    """The commit a PR branched from, whose plan governs it; None for a revision, or for
    a PR with --plan FILE where no base branch is here."""
    from ledger.evidence.errors import Error
    from ledger.identity import source

    if pr is None:
        return None
    # The plan on the base branch governs a PR; `identify` read it from there.
    try:
        return source.base_commit(gitrepo, base, offline=True)
    except Error:
        if plan is None:
            raise
        # With --plan FILE and no base branch here, no governing plan can be read:
        # the answer is a what-if, never the PR's own plan taken as governing.
        return None


def _write(data: str, output: Path | None, to_stdout: bool) -> None:
    if to_stdout or output is None:
        click.echo(data, nl=False)
    else:
        tmp = output.with_name(output.name + ".part")
        tmp.write_text(data)
        tmp.replace(output)
        click.echo(f"wrote {output}", err=True)
