"""`ledger plan record`: the governing plan recorded in the ledger: a base branch's
(by the job that runs there after a merge, or on the ledger's host) or a revision's,
for receipts recorded before writers recorded it themselves."""

from __future__ import annotations

from pathlib import Path

import click

from ledger.cli._common import db_option, open_store, rev_options, server_option
from ledger.evidence.errors import UsageError


@click.group("plan")
def plan() -> None:
    """The governing plan as evidence in the ledger."""


@plan.command("record")
@rev_options
@click.option(
    "--branch",
    metavar="BRANCH",
    help="Record the plan at the tip of BRANCH as the one that governs every pull request "
    "into it (the job that runs on the base branch after a merge).",
)
@server_option(
    "Record through a `ledger serve` at URL, with a token that has the plans role "
    "(--token or $LEDGER_TOKEN); a runner token is refused."
)
@click.option(
    "--token", metavar="TOKEN", help="Bearer token of the server (default: $LEDGER_TOKEN)."
)
@db_option
def record(
    pr: int | None,
    rev: str | None,
    base: str | None,
    offline: bool,
    repo: Path | None,
    branch: str | None,
    server: str | None,
    token: str | None,
    db: str | None,
) -> None:
    """Record the plan that governs a revision (for --pr N: the one committed on the
    base branch; for --branch B: the one at B's tip, for every pull request into B) with
    the git objects that prove it, so that readers without a checkout (a server with
    no mirror, the web pages) judge receipts with it.

    Run on the ledger's host, or with --server by the base branch's post-merge job
    (trusted code, a token with the plans role), in a checkout of the repository.
    Prints the entry id.
    """
    from ledger.identity import source
    from ledger.plans import governing
    from ledger.plans.entry import collect
    from ledger.qualification.plan import PLAN_FILE

    r_ = source.open_repo(repo)
    if branch is not None:
        if pr is not None or rev is not None or base is not None:
            raise UsageError("--branch records the branch's tip: give no --pr, --rev or --base")
        tip = source.base_commit(r_, branch, offline)
        at_tip = governing.plan_at(r_, tip, None)
        if at_tip is None:
            raise UsageError(
                f"no {PLAN_FILE} at the tip of {branch} ({tip[:12]}): nothing to record"
            )
        # The repository's one identity, as its receipts name it: the remote, else the
        # plan's `[project] repo` (never the root commit where the plan names one).
        repo_id, pr_, commit = source.repo_name(r_, at_tip), None, tip
        ev = collect(r_, tip, PLAN_FILE)
        what = f"branch {branch} (tip {tip[:12]})"
        on: str | None = branch
    else:
        ident = governing.identify(
            r_, rev=rev, pr=pr, plan_file=None, offline=offline, base=base, for_statement=True
        )
        if ident.governing is None:
            raise UsageError(
                f"no {PLAN_FILE} governs {ident.revision.commit[:12]}: nothing to record"
            )
        r = ident.revision
        repo_id, pr_, commit, ev, on = r.repo, r.pr, r.commit, ident.governing, ident.branch
        what = f"PR #{r.pr} head {r.commit[:12]}" if r.pr is not None else r.commit[:12]
    if server is not None:
        import json

        from ledger.identity.repoid import canonical_repo
        from ledger.plans.entry import plan_body
        from ledger.remote.client import post_plan

        doc = json.loads(plan_body(canonical_repo(repo_id), pr_, commit, ev, branch=on))
        got = post_plan(server, doc, token)
        eid, added = str(got["id"]), bool(got.get("added"))
    else:
        from ledger.plans.ledger import record_plan

        eid, added = record_plan(open_store(db), repo_id, pr_, commit, ev, branch=on)
    click.echo(
        f"{'recorded' if added else 'already recorded'}: {ev.text} governs {what} of {repo_id}",
        err=True,
    )
    click.echo(eid)


@plan.command("assert")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--repository", required=True, metavar="ID", help="The repository id it governs.")
@click.option("--commit", required=True, metavar="SHA", help="The head (or revision) it governs.")
@click.option("--pr", type=click.IntRange(min=1), metavar="N", help="The commit is PR N's head.")
@click.option(
    "--branch",
    metavar="BRANCH",
    help="The commit is BRANCH's tip: the plan of pull requests into it.",
)
@db_option
def assert_(
    file: Path, repository: str, commit: str, pr: int | None, branch: str | None, db: str | None
) -> None:
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
    if branch is not None and pr is not None:
        raise UsageError("--branch names a branch's tip, --pr a PR's head: give one")
    ev = asserted(raw, PLAN_FILE)
    eid, added = record_plan(open_store(db), repository, pr, commit, ev, branch=branch)
    click.echo(f"{'recorded' if added else 'already recorded'}: {ev.text}", err=True)
    click.echo(eid)


__all__ = ["plan"]
