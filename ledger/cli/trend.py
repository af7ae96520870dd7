"""`ledger trend`: a claim's measured figure across a PR's heads and the base
branch's last commits, from the receipts alone."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from ledger.cli._common import db_option, emit_json, json_option, open_store, rev_options
from ledger.evidence.errors import UsageError

__all__ = ["trend"]


@click.command()
@rev_options
@click.option(
    "--claim",
    "claims",
    multiple=True,
    required=True,
    metavar="NAME",
    help="The claim whose figure to follow (repeatable).",
)
@click.option(
    "--last",
    type=click.IntRange(min=0, max=1000),
    default=10,
    show_default=True,
    metavar="N",
    help="Base branch commits (first parents) to look at, newest first; with --rev, "
    "commits up to REV.",
)
@db_option
@json_option
def trend(
    pr: int | None,
    rev: str | None,
    base: str | None,
    offline: bool,
    repo: Path | None,
    claims: Sequence[str],
    last: int,
    db: str | None,
    as_json: bool,
) -> None:
    """How each claim's figure moved, from the receipts alone.

    The figure: admission's worst measured/predicted, gradient-compare's worst
    error over its floor, else the peak bytes; on the base branch's last N
    commits (oldest first), then on each head of --pr N as recorded, each head
    with its change in % against the newest base receipt at its scope (or why
    there is none). The server's page /trend?repo=R&pr=N&claim=C plots it.
    """
    from ledger.identity import source
    from ledger.plans import governing
    from ledger.read.render import render_trend
    from ledger.trend import trend as trend_of

    if pr is None and rev is None:
        raise UsageError("give --pr N (its heads and its base branch) or --rev REV")
    gitrepo = source.open_repo(repo)
    ident = governing.identify(gitrepo, rev=rev, pr=pr, offline=offline, base=base)
    tip = source.base_commit(gitrepo, base, offline=True) if pr is not None else rev
    commits = [c.hexsha for c in gitrepo.iter_commits(tip, first_parent=True, max_count=last)]
    from ledger.read.revoked import void_receipts

    store = open_store(db)

    def void(ids: Sequence[str]) -> dict[str, str]:
        # Weighed as `show` weighs it, by the plan proved here where there is one.
        return void_receipts(store, ids, plan=ident.plan)

    found = [
        trend_of(store, ident.revision.repo, c, pr=pr, base_commits=commits, void=void)
        for c in claims
    ]
    if as_json:
        emit_json({"repo": ident.revision.repo, "pr": pr, "trends": [t.to_json() for t in found]})
    else:
        click.echo(render_trend(ident.revision.repo, pr, found), nl=False)
