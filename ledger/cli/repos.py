"""`ledger repo alias OLD NEW`: receipts recorded under an earlier repository id count
under the current one (a folder name, a root commit, a moved remote)."""

from __future__ import annotations

import click

from ledger.cli._common import db_option, open_store


@click.group("repo")
def repo() -> None:
    """Repository identities: the id receipts speak of, and its history."""


@repo.command("alias")
@click.argument("old")
@click.argument("new")
@click.option("--reason", required=True, help="Why OLD is NEW (logged with the alias).")
@db_option
def alias(old: str, new: str, reason: str, db: str | None) -> None:
    """Log that receipts recorded under repository id OLD count under NEW (run on the
    ledger's host: the alias is a log entry the checkpoint signs and `ledger audit`
    checks). Prints the entry id."""
    from ledger.identity.aliases import add_alias
    from ledger.identity.repoid import canonical_repo

    eid, added = add_alias(open_store(db), old, new, reason)
    click.echo(
        f"{'recorded' if added else 'already recorded'}: receipts under "
        f"{canonical_repo(old)} count under {canonical_repo(new)}",
        err=True,
    )
    click.echo(eid)


__all__ = ["repo"]
