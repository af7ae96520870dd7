"""`ledger push` (the outbox), `ledger artifact get`, `ledger token new`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from ledger.cli._common import db_option, emit_json, json_option, open_reader, server_option
from ledger.evidence.errors import EXIT_NEGATIVE, UsageError
from ledger.read.inert import inert


def _server_url(server: str | None) -> str:
    import os

    url = server or os.environ.get("LEDGER_SERVER")
    if not url:
        raise UsageError("give --server URL (or set $LEDGER_SERVER)")
    return url


token_option = click.option(
    "--token", metavar="TOKEN", help="Bearer token of the server (default: $LEDGER_TOKEN)."
)


@click.command()
@server_option("The ledger server (default: $LEDGER_SERVER).")
@token_option
@json_option
def push(server: str | None, token: str | None, as_json: bool) -> None:
    """Send the outbox: signed receipts (and their artifacts) a server did not take yet.

    Batches are sent oldest first and removed only once the server
    acknowledged every envelope; exit 1 when any stay behind, 3 when the
    server cannot be reached at all (nothing was sent; a retry may pass).
    """
    from ledger.remote.outbox import Outbox
    from ledger.remote.outbox import push as do_push

    box = Outbox()
    url = _server_url(server)
    if next(box.batches(), None) is not None:
        from ledger.remote.client import health

        # A server not reached at all is infrastructure (exit 3, which CI retries), not a
        # batch it refused: asked once before sending, so an outage reads as one.
        health(url)
    res = do_push(url, box, token)
    if as_json:
        emit_json(
            {"sent": res.sent, "kept": res.kept, "recorded": res.recorded, "why": res.reasons}
        )
    else:
        click.echo(f"sent {res.sent}, kept {res.kept} in {box.path}")
        for r in res.reasons or []:
            click.echo(f"  kept {r}", err=True)
    if res.kept:
        raise SystemExit(EXIT_NEGATIVE)


@click.group()
def artifact() -> None:
    """Artifacts that receipts name (content-addressed, digest-checked on the way out)."""


@artifact.command("get")
@click.argument("digest")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True)
@server_option("Read from a `ledger serve` at URL instead of --db.")
@db_option
def artifact_get(digest: str, output: Path, server: str | None, db: str | None) -> None:
    """Write an artifact's bytes to FILE after checking them against DIGEST."""
    data, media = open_reader(db, server).artifact(digest)
    from ledger.cli.files import write_atomically

    write_atomically(output, data)
    click.echo(f"wrote {output} ({len(data)} bytes, {media})")


@click.group()
def token() -> None:
    """Bearer tokens for `ledger serve --tokens FILE`."""


_tokens_file = click.option(
    "--tokens", type=click.Path(dir_okay=False, path_type=Path), required=True, help="Tokens file."
)


@token.command("new")
@click.argument("holder")
@click.option(
    "--role",
    "roles",
    multiple=True,
    type=click.Choice(["runner", "keys", "operator", "plans", "read", "reviewer"]),
    help="What the token may do (repeatable; default runner): runner uploads artifacts, "
    "read reads the fleet's device health and quarantine (GET /v1/fleet), "
    "keys registers/revokes runner and reviewer keys, operator signs checkpoints, audits "
    "and revokes receipts, reviewer revokes a receipt on its own dispute of it, "
    "plans records the base branch's plan (its post-merge job, never a pull request's).",
)
@_tokens_file
def token_new(holder: str, roles: Sequence[str], tokens: Path) -> None:
    """Add a token for HOLDER to the file (kept hashed) and print it once."""
    from ledger.service.auth import new_token

    click.echo(new_token(holder, tokens, roles or ("runner",)))
    granted = ", ".join(dict.fromkeys(roles or ("runner",)))
    click.echo(
        f"token for {holder} ({granted}) added to {tokens} (only its hash is kept)", err=True
    )


@token.command("list")
@_tokens_file
@json_option
def token_list(tokens: Path, as_json: bool) -> None:
    """The holders and roles of the tokens in the file."""
    from ledger.service.auth import ROLES, list_tokens

    rows: list[dict[str, Any]] = [
        {"holder": g.holder, "roles": [r for r in ROLES if r in g.roles]}
        for g in list_tokens(tokens)
    ]
    if as_json:
        emit_json(rows)
        return
    for r in rows:
        click.echo(f"{inert(r['holder'])}  {','.join(r['roles'])}")


@token.command("revoke")
@click.argument("holder")
@_tokens_file
def token_revoke(holder: str, tokens: Path) -> None:
    """Remove HOLDER's tokens; a running server refuses them from its next request."""
    from ledger.service.auth import revoke_token

    n = revoke_token(holder, tokens)
    click.echo(f"removed {n} token(s) of {holder} from {tokens}")
