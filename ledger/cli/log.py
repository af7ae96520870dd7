"""`ledger log ...` (the transparency log) and `ledger serve`."""

from __future__ import annotations

import click

from ledger.cli._common import db_option, emit_json, json_option, keydir, open_store


@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; 0.0.0.0 exposes it (reads need no authentication).",
)
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8765, show_default=True)
@db_option
def serve(host: str, port: int, db: str | None) -> None:
    """Serve this ledger over HTTP: hosts record with --server URL, without database credentials.

    Posted envelopes are verified and recorded like `ledger record` (all or
    nothing); entries, bundles and the newest checkpoint can be read by anyone
    who reaches the port. Fresh checkpoints are signed when $LEDGER_KEYS holds
    the ledger key. One line per request on stderr; Ctrl-C stops.
    """
    from ledger.server import serve as run_server
    from ledger.store.store import resolve_url

    run_server(resolve_url(db), host, port, keydir())


@click.group()
def log() -> None:
    """The transparency log: checkpoints, inclusion and consistency proofs."""


@log.command("checkpoint")
@db_option
def log_checkpoint(db: str | None) -> None:
    """Sign a checkpoint of the log as it is now (with the ledger key)."""
    from ledger.log import checkpoint

    click.echo(checkpoint(open_store(db), keydir()).decode(), nl=False)


@log.command("proof")
@click.argument("receipt")
@db_option
@json_option
def log_proof(receipt: str, db: str | None, as_json: bool) -> None:
    """Inclusion proof of an entry against the newest checkpoint (verified before printing)."""
    from ledger.log import inclusion

    store = open_store(db)
    e = store.resolve(receipt)
    doc = inclusion(store, e.seq, keydir()).to_json(e.entry_id)
    if as_json:
        emit_json(doc)
        return
    click.echo(f"entry {doc['index']} of {doc['size']}, verified")
    for h in doc["proof"]:  # type: ignore[attr-defined]
        click.echo(f"  {h}")
    click.echo(doc["checkpoint"], nl=False)


@log.command("consistency")
@click.argument("old", type=click.IntRange(min=1))
@click.argument("new", type=click.IntRange(min=1))
@db_option
@json_option
def log_consistency(old: int, new: int, db: str | None, as_json: bool) -> None:
    """Consistency proof between checkpoints of sizes OLD and NEW (verified before printing)."""
    from ledger.log import consistency

    proof = [h.hex() for h in consistency(open_store(db), old, new)]
    if as_json:
        emit_json({"old": old, "new": new, "proof": proof})
        return
    click.echo(f"consistent: {old} -> {new}, verified")
    for h in proof:
        click.echo(f"  {h}")
