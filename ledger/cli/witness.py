"""`ledger witness ...`: a C2SP tlog-witness for ledgers' (and any Ed25519 log's) checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ledger.cli._common import keydir, read_file
from ledger.evidence.errors import UsageError

if TYPE_CHECKING:
    from ledger.evidence.keys import LocalKey


@click.group()
def witness() -> None:
    """A witness: cosigns checkpoints that extend the last one it cosigned."""


def _key(name: str) -> LocalKey:
    from ledger.evidence.errors import NotFoundError

    keys = keydir()
    try:
        return keys.load(name)
    except NotFoundError:
        return keys.create(name)


_NAME = click.option(
    "--name",
    required=True,
    help="The witness's name in its cosignature lines (a schema-less URL, e.g. w.example/1).",
)
_KEY = click.option(
    "--key",
    "key_name",
    required=True,
    help="Its private key's name under $LEDGER_KEYS (made on first use).",
)


@witness.command("vkey")
@_NAME
@_KEY
def vkey(name: str, key_name: str) -> None:
    """Print the witness's verifier key, for a tlog-policy `witness` line."""
    from ledger.transparency.vkey import WITNESS_ED25519, VKey, valid_note_name

    if not valid_note_name(name):
        raise UsageError(f"--name {name!r}: no spaces or '+'")
    local = _key(key_name)
    click.echo(VKey(name, WITNESS_ED25519, local.public).text())


@witness.command("serve")
@_NAME
@_KEY
@click.option(
    "--logs",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The logs it follows: `log VKEY` lines (`ledger log vkey` prints a ledger's).",
)
@click.option(
    "--state",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Its SQLite state file (the last checkpoint cosigned per log; made on first use).",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8766, show_default=True)
def serve(name: str, key_name: str, logs: Path, state: Path, host: str, port: int) -> None:
    """Answer POST /add-checkpoint (C2SP tlog-witness) until Ctrl-C."""
    from ledger.service.witness_http import WitnessServer
    from ledger.transparency.vkey import valid_note_name
    from ledger.transparency.witness import Witness, parse_logs

    if not valid_note_name(name):
        raise UsageError(f"--name {name!r}: no spaces or '+'")
    local = _key(key_name)
    w = Witness(name, local.private, parse_logs(read_file(logs)), state)
    server = WitnessServer(w, host, port)
    click.echo(f"witness {w.vkey.text()} at {server.url}", err=True)
    try:
        server.serve_forever()
    finally:
        server.close()
