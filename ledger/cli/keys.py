"""`ledger init` and `ledger keys ...`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

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

F = TypeVar("F", bound=Callable[..., Any])


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


def _host_options(f: F) -> F:
    f = click.option(
        "--gpu",
        "gpus",
        multiple=True,
        metavar="UUID",
        help="A GPU UUID of the one --host, where known: the key's receipts there name "
        "no other GPU (repeatable).",
    )(f)
    return click.option(
        "--host",
        "hosts",
        multiple=True,
        metavar="HOST",
        help="A host a runner key speaks for, as its receipts name it (repeatable); "
        "its receipts may speak of no other host's devices.",
    )(f)


def _bound(role: str, hosts: tuple[str, ...], gpus: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """The hosts a runner key is registered for, each with its declared GPUs."""
    from ledger.evidence.errors import UsageError

    if role != "runner":
        if hosts or gpus:
            raise UsageError(f"--host, --gpu: a {role} key speaks for no host")
        return {}
    if not hosts:
        raise UsageError("a runner key names the hosts it speaks for: --host HOST")
    if gpus and len(hosts) != 1:
        raise UsageError("--gpu names the GPUs of one host: give one --host with them")
    bound = {h: gpus for h in hosts}
    from ledger.evidence.errors import RefusedError
    from ledger.evidence.hosts import read_hosts

    try:
        read_hosts({h: list(g) for h, g in bound.items()})
    except RefusedError as e:
        raise UsageError(e.reason()) from None
    return bound


def _said_hosts(bound: dict[str, tuple[str, ...]]) -> str:
    return ", ".join(
        f"{h!a}"[1:-1] + (f" ({len(g)} GPU{'s' if len(g) != 1 else ''})" if g else "")
        for h, g in sorted(bound.items())
    )


@keys.command("new")
@click.argument("name")
@click.option("--role", type=click.Choice(["runner", "reviewer"]), required=True)
@_host_options
@db_option
def keys_new(
    name: str, role: str, hosts: tuple[str, ...], gpus: tuple[str, ...], db: str | None
) -> None:
    """Make a key pair (private key mode 0600 in $LEDGER_KEYS) and register its public key.
    A runner key speaks for this host unless --host names others."""
    import socket

    from ledger.write.ingest import register_key

    if role == "runner" and not hosts:
        # Made where it runs: the host its receipts name (`socket.gethostname()`).
        hosts = (socket.gethostname(),)
    bound = _bound(role, hosts, gpus)
    store = open_store(db)
    kd = keydir()
    kd.file(name)  # a bad name is refused before anything is written
    local = kd.create(name)
    kid, _ = register_key(
        store,
        name,
        role,  # type: ignore[arg-type]
        local.public,
        hosts=bound if role == "runner" else None,
    )
    # Labelled: a bare 64-hex line says nothing of what it is.
    click.echo(f"name         {name}")
    click.echo(f"role         {role}")
    click.echo(f"key id       {kid}")
    if bound:
        click.echo(f"hosts        {_said_hosts(bound)}")
    click.echo(f"private key  {kd.file(name)} (mode 0600; never leaves this machine)")


@keys.command("add")
@click.argument("pem", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--name", required=True)
@click.option("--role", type=click.Choice(["runner", "reviewer", "ledger"]), required=True)
@_host_options
@server_option("A `ledger serve` at URL instead of --db.")
@click.option("--token", metavar="TOKEN", help="With --server: its token (default: $LEDGER_TOKEN).")
@db_option
def keys_add(
    pem: Path,
    name: str,
    role: str,
    hosts: tuple[str, ...],
    gpus: tuple[str, ...],
    server: str | None,
    token: str | None,
    db: str | None,
) -> None:
    """Register someone else's public key (PEM) under a name and role; a runner key
    with the hosts it speaks for (--host)."""
    from ledger.evidence.keys import load_public_pem
    from ledger.write.ingest import register_key

    public = load_public_pem(read_file(pem), str(pem))
    bound = _bound(role, hosts, gpus)
    if server:
        from ledger.remote.client import register_key as remote_register

        doc = remote_register(
            server, name, role, read_file(pem), token, hosts=bound if bound else None
        )
        click.echo(doc["keyid"] if doc["added"] else f"{doc['keyid']} (already registered)")
        return
    kid, new = register_key(
        open_store(db),
        name,
        role,  # type: ignore[arg-type]
        public,
        hosts=bound if role == "runner" else None,
    )
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


@keys.group("host")
def keys_host() -> None:
    """The hosts a runner key speaks for: add or remove one (logged, with the reason)."""


@keys_host.command("add")
@click.argument("key")
@click.argument("host")
@click.option(
    "--gpu", "gpus", multiple=True, metavar="UUID", help="A GPU UUID of HOST (repeatable)."
)
@click.option("--reason", required=True, help="Why; recorded in the log.")
@db_option
def keys_host_add(key: str, host: str, gpus: tuple[str, ...], reason: str, db: str | None) -> None:
    """Let runner key KEY speak for HOST (and, with --gpu, only those GPUs there).
    Through a server: POST /v1/keys/KEY/hosts with a keys token."""
    from ledger.write.hosts import change_host

    info, after = change_host(open_store(db), key, "add", host, gpus, reason)
    click.echo(f"{info.name} {info.keyid[:16]} speaks for {after.said()}")


@keys_host.command("remove")
@click.argument("key")
@click.argument("host")
@click.option("--reason", required=True, help="Why; recorded in the log.")
@db_option
def keys_host_remove(key: str, host: str, reason: str, db: str | None) -> None:
    """Stop runner key KEY speaking for HOST: its receipts there are refused from now
    on, and those logged already no longer count in the fleet."""
    from ledger.write.hosts import change_host

    info, after = change_host(open_store(db), key, "remove", host, (), reason)
    click.echo(f"{info.name} {info.keyid[:16]} speaks for {after.said()}")


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
@click.option(
    "--key",
    "key_name",
    metavar="NAME",
    help="Key in $LEDGER_KEYS that signs the revocation: a ledger key (default on the"
    " ledger's host: the active one) or the revoked key itself.",
)
@server_option("A `ledger serve` at URL instead of --db.")
@click.option("--token", metavar="TOKEN", help="With --server: its token (default: $LEDGER_TOKEN).")
@db_option
def keys_revoke(
    keyid: str,
    reason: str,
    key_name: str | None,
    server: str | None,
    token: str | None,
    db: str | None,
) -> None:
    """Revoke a key: anything it signs that is logged afterwards does not count.

    The revocation is signed (--key), by a ledger key or the revoked key itself: it
    counts only where that signature verifies."""
    from ledger.evidence.errors import UsageError
    from ledger.write.ingest import revoke_key

    key = keydir().load(key_name) if key_name else None
    if server:
        from ledger.remote.client import revoke_key as remote_revoke

        if key is None:
            raise UsageError("--server: the revocation is signed here: --key NAME")
        doc = remote_revoke(server, keyid, reason, key, token)
        click.echo(f"revoked {doc['name']} {doc['keyid']}")
        return
    info = revoke_key(open_store(db), keyid, reason, key=key)
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
