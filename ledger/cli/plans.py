"""`ledger plan record`: the governing plan of a revision recorded in the ledger, for
receipts recorded before writers recorded it themselves."""

from __future__ import annotations

from pathlib import Path

import click

from ledger.cli._common import db_option, open_store, rev_options
from ledger.evidence.errors import UsageError


@click.group("plan")
def plan() -> None:
    """The governing plan as evidence in the ledger."""


@plan.command("record")
@rev_options
@db_option
def record(
    pr: int | None,
    rev: str | None,
    base: str | None,
    offline: bool,
    repo: Path | None,
    db: str | None,
) -> None:
    """Record the plan that governs a revision (for --pr N: the one committed on the
    base branch) with the git objects that prove it, so that readers without a
    checkout (a server with no mirror, the web pages) judge its receipts with it.

    Run on the ledger's host, in a checkout of the repository. Prints the entry id.
    """
    from ledger.identity import source
    from ledger.plans.ledger import record_plan
    from ledger.qualification.plan import PLAN_FILE

    ident = source.identify(
        source.open_repo(repo),
        rev=rev,
        pr=pr,
        plan_file=None,
        offline=offline,
        base=base,
        for_statement=True,
    )
    if ident.governing is None:
        raise UsageError(f"no {PLAN_FILE} governs {ident.revision.commit[:12]}: nothing to record")
    r = ident.revision
    eid, added = record_plan(open_store(db), r.repo, r.pr, r.commit, ident.governing)
    what = f"PR #{r.pr} head {r.commit[:12]}" if r.pr is not None else r.commit[:12]
    click.echo(
        f"{'recorded' if added else 'already recorded'}: {ident.governing.text} "
        f"governs {what} of {r.repo}",
        err=True,
    )
    click.echo(eid)


@plan.command("assert")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--repository", required=True, metavar="ID", help="The repository id it governs.")
@click.option("--commit", required=True, metavar="SHA", help="The head (or revision) it governs.")
@click.option("--pr", type=click.IntRange(min=1), metavar="N", help="The commit is PR N's head.")
@db_option
def assert_(file: Path, repository: str, commit: str, pr: int | None, db: str | None) -> None:
    """Record FILE as the plan that governs a commit the ledger holds receipts for, where
    no checkout proves it (receipts of an earlier release whose repository is gone).
    Readers name it as asserted by the ledger's operator, not proved by git objects.
    Prints the entry id."""
    from ledger.plans.entry import asserted
    from ledger.plans.ledger import record_plan
    from ledger.qualification.plan import PLAN_FILE, parse_plan

    raw = file.read_bytes()
    try:
        parse_plan(raw.decode("utf-8"), str(file))
    except UnicodeDecodeError:
        raise UsageError(f"{file}: not UTF-8 text") from None
    if len(commit) != 40 or any(c not in "0123456789abcdef" for c in commit):
        raise UsageError(f"--commit {commit!r}: expected a full commit id (40 hex digits)")
    ev = asserted(raw, PLAN_FILE)
    eid, added = record_plan(open_store(db), repository, pr, commit, ev)
    click.echo(f"{'recorded' if added else 'already recorded'}: {ev.text}", err=True)
    click.echo(eid)


__all__ = ["plan"]
