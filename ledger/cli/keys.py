"""`ledger init` and `ledger keys ...`."""

from __future__ import annotations

from pathlib import Path

import click

from ledger.cli._common import (
    db_option,
    emit_json,
    json_option,
    keydir,
    open_reader,
    open_store,
    read_file,
    server_option,
)


@click.command()
@db_option
def init(db: str | None) -> None:
    """Create the ledger (or migrate an older one) and its ledger key."""
    from ledger.store.store import resolve_url
    from ledger.write.ingest import init_ledger

    url = resolve_url(db)
    result = init_ledger(url, keydir())
    if not result.created:
        click.echo(f"ledger at {url} is up to date; ledger key {result.name} {result.keyid[:16]}")
        return
    click.echo(f"created ledger at {url}")
    click.echo(f"ledger key {result.name} {result.keyid} (private key {result.private_key})")


@click.group()
def keys() -> None:
    """Ed25519 keys: runner, reviewer and ledger roles. Private keys stay in $LEDGER_KEYS."""


@keys.command("new")
@click.argument("name")
@click.option("--role", type=click.Choice(["runner", "reviewer"]), required=True)
@db_option
def keys_new(name: str, role: str, db: str | None) -> None:
    """Make a key pair (private key mode 0600 in $LEDGER_KEYS) and register its public key."""
    from ledger.write.ingest import register_key

    store = open_store(db)
    kd = keydir()
    local = kd.create(name)
    kid, _ = register_key(store, name, role, local.public)  # type: ignore[arg-type]
    # Labelled: a bare 64-hex line says nothing of what it is.
    click.echo(f"name         {name}")
    click.echo(f"role         {role}")
    click.echo(f"key id       {kid}")
    click.echo(f"private key  {kd.file(name)} (mode 0600; never leaves this machine)")


@keys.command("add")
@click.argument("pem", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--name", required=True)
@click.option("--role", type=click.Choice(["runner", "reviewer", "ledger"]), required=True)
@server_option("A `ledger serve` at URL instead of --db.")
@click.option("--token", metavar="TOKEN", help="With --server: its token (default: $LEDGER_TOKEN).")
@db_option
def keys_add(
    pem: Path, name: str, role: str, server: str | None, token: str | None, db: str | None
) -> None:
    """Register someone else's public key (PEM) under a name and role."""
    from ledger.evidence.keys import load_public_pem
    from ledger.write.ingest import register_key

    public = load_public_pem(read_file(pem), str(pem))
    if server:
        from ledger.remote.client import register_key as remote_register

        doc = remote_register(server, name, role, read_file(pem), token)
        click.echo(doc["keyid"] if doc["added"] else f"{doc['keyid']} (already registered)")
        return
    kid, new = register_key(open_store(db), name, role, public)  # type: ignore[arg-type]
    click.echo(kid if new else f"{kid} (already registered)")


@keys.command("list")
@server_option("A `ledger serve` at URL instead of --db.")
@db_option
@json_option
def keys_list(server: str | None, db: str | None, as_json: bool) -> None:
    """Registered keys with role and revocation state."""
    from ledger.read.render import render_keys

    local = set(keydir().names())
    rows = [
        {**k, "private_key_here": k["name"] in local}
        for k in open_reader(db, server).registered_keys()
    ]
    if as_json:
        emit_json(rows)
    else:
        click.echo(render_keys(rows), nl=False)


@keys.command("export")
@click.argument("name")
@db_option
def keys_export(name: str, db: str | None) -> None:
    """Print a registered key's public PEM (for `verify --trust` and `keys add` elsewhere)."""
    from ledger.evidence.keys import find_key, public_pem

    click.echo(public_pem(find_key(open_store(db).keys(), name).public).decode(), nl=False)


@keys.command("revoke")
@click.argument("keyid")
@click.option("--reason", required=True, help="Why; recorded in the log.")
@server_option("A `ledger serve` at URL instead of --db.")
@click.option("--token", metavar="TOKEN", help="With --server: its token (default: $LEDGER_TOKEN).")
@db_option
def keys_revoke(
    keyid: str, reason: str, server: str | None, token: str | None, db: str | None
) -> None:
    """Revoke a key: anything it signs that is logged afterwards does not count."""
    from ledger.write.ingest import revoke_key

    if server:
        from ledger.remote.client import revoke_key as remote_revoke

        doc = remote_revoke(server, keyid, reason, token)
        click.echo(f"revoked {doc['name']} {doc['keyid']}")
        return
    info = revoke_key(open_store(db), keyid, reason)
    click.echo(f"revoked {info.name} {info.keyid}")


@keys.command("rotate-ledger")
@click.option("--name", help="Name of the new ledger key (default: ledger-N).")
@db_option
def keys_rotate_ledger(name: str | None, db: str | None) -> None:
    """Replace the ledger key: a new key signs checkpoints from now on.

    The log is checkpointed under the old key first, then the new key is
    registered and the old one revoked ("rotated"); checkpoints it signed keep
    verifying, and bundles carry every ledger key a verifier needs.
    """
    from ledger.transparency.checkpoints import rotate_ledger_key

    old, kid = rotate_ledger_key(open_store(db), keydir(), name)
    click.echo(kid)
    click.echo(
        f"rotated: {old.name} {old.keyid[:12]} revoked, checkpoints now by {kid[:12]}", err=True
    )
