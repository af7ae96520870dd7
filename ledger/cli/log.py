"""`ledger log ...` (the transparency log) and `ledger serve`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ledger.cli._common import (
    ask_server,
    db_option,
    emit_json,
    json_option,
    keydir,
    open_reader,
    open_store,
    read_file,
    server_option,
)
from ledger.evidence.errors import UsageError

if TYPE_CHECKING:
    from ledger.transparency.policy import Policy


@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; 0.0.0.0 exposes it (reads need no authentication).",
)
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8765, show_default=True)
@click.option(
    "--tokens",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Bearer tokens (HOLDER sha256:HEX ROLE,... lines; `ledger token new`): runner "
    "uploads, keys registers keys, operator signs checkpoints and audits; re-read on change.",
)
@click.option(
    "--artifacts",
    metavar="URL",
    help="Artifact store: a folder or fsspec URL (default: $LEDGER_ARTIFACTS, else beside the db).",
)
@click.option(
    "--deadline",
    type=click.FloatRange(min=1),
    default=60,
    show_default=True,
    help="Seconds one request may take, body included.",
)
@click.option(
    "--repo",
    "mirrors",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="A checkout in which status pages identify PRs and their plan as "
    "`status --offline` would (repeatable); its remote's PR refs and branches are fetched "
    "before a question is judged in it, at most once per --fetch-every.",
)
@click.option(
    "--fetch-every",
    type=click.FloatRange(min=0),
    default=30,
    show_default=True,
    metavar="SECONDS",
    help="Fetch each --repo checkout at most this often (0: before every question); a "
    "fetch that fails is a note on the answer, which judges the checkout as last fetched.",
)
@db_option
def serve(
    host: str,
    port: int,
    tokens: Path | None,
    artifacts: str | None,
    deadline: float,
    mirrors: tuple[Path, ...],
    fetch_every: float,
    db: str | None,
) -> None:
    """Serve this ledger over HTTP: hosts record with --server URL, without database credentials.

    Posted envelopes are verified and recorded like `ledger record` (all or
    nothing); everything the CLI reads is served to whoever reaches the port,
    with the reviewer's pages at /. Keys, artifacts and checkpoints are
    written with a --tokens bearer token. Fresh checkpoints are signed when
    $LEDGER_KEYS holds the ledger key. Ctrl-C stops.
    """
    try:
        from ledger.service.run import serve as run_server
    except ImportError as e:
        raise UsageError(
            f"ledger serve needs the server extra ({e.name}): pip install '.[server]'"
        ) from None
    from ledger.store.store import resolve_url

    _say_mirrors(mirrors)
    try:
        run_server(
            resolve_url(db),
            host,
            port,
            keydir(),
            tokens=tokens,
            artifacts=artifacts,
            deadline_s=deadline,
            mirrors=mirrors,
            fetch_every=fetch_every,
        )
    except SystemExit as e:
        if e.code in (0, None):
            raise
        # uvicorn ends a server that could not start (a taken port, an address not this
        # host's) with its own status 3, which here means "retry: infrastructure only".
        # A port to choose is the operator's to fix: usage or environment, exit 2.
        raise UsageError(
            f"ledger serve could not start on {host}:{port} (the port is taken, or the "
            "address is not this host's: the line above says which); pass another --port"
        ) from None


def _say_mirrors(mirrors: Sequence[Path]) -> None:
    """Each checkout's repository id, before serving: the pages answer from a checkout
    only for receipts under its id (or an id `ledger repo alias` links to it), so an
    operator sees at once which id that is. A folder that is no repository is refused."""
    from ledger.identity import source

    for path in mirrors:
        rid = source.repo_name(source.open_repo(path))
        click.echo(f"ledger serve: --repo {path}: repository id {rid}", err=True)


@click.group()
def log() -> None:
    """The transparency log: checkpoints, inclusion and consistency proofs."""


_WITNESSES = click.option(
    "--witnesses",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="LEDGER_WITNESSES",
    help="A C2SP tlog-policy file: its witnesses with a URL are asked to cosign "
    "(default: $LEDGER_WITNESSES).",
)


def _policy(witnesses: Path) -> Policy:
    from ledger.transparency.policy import parse_policy

    return parse_policy(read_file(witnesses))


def _cosign(db: str | None, policy: Policy) -> bytes:
    """Ask the policy's witnesses; one stderr line each; the cosigned note.

    VerificationError (exit 1) naming the witnesses when their refusals leave the
    quorum out of reach: a script must not take such a checkpoint for witnessed.
    Witnesses that were only unreachable leave exit 0 (`ledger log cosign` asks
    them again)."""
    from ledger.evidence.errors import VerificationError
    from ledger.transparency.collect import cosign, cosigned_note, quorum_refused

    store = open_store(db)
    results = cosign(store, policy)
    for r in results:
        click.echo(f"witness {r.witness}: {r.detail}", err=True)
    latest = store.latest_checkpoint()
    assert latest is not None
    refused = quorum_refused(policy, latest.size, results)
    if refused is not None:
        raise VerificationError(refused)
    return cosigned_note(store, latest.size)


@log.command("checkpoint")
@ask_server
@click.option("--token", metavar="TOKEN", help="With --server: its token (default: $LEDGER_TOKEN).")
@_WITNESSES
@db_option
def log_checkpoint(
    server: str | None, token: str | None, witnesses: Path | None, db: str | None
) -> None:
    """Sign a checkpoint of the log as it is now (with the ledger key); with
    --witnesses, have it cosigned and print the cosigned note."""
    from ledger.transparency.checkpoints import checkpoint

    if server:
        from ledger.remote.client import sign_checkpoint

        click.echo(sign_checkpoint(server, token).decode(), nl=False)
        return
    # The policy is read first: a malformed one refuses before anything is signed.
    policy = _policy(witnesses) if witnesses is not None else None
    note = checkpoint(open_store(db), keydir())
    if policy is not None:
        note = _cosign(db, policy)
    click.echo(note.decode(), nl=False)


@log.command("cosign")
@click.option(
    "--witnesses",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="LEDGER_WITNESSES",
    required=True,
    help="A C2SP tlog-policy file naming the witnesses (with URLs) to ask.",
)
@db_option
def log_cosign(witnesses: Path, db: str | None) -> None:
    """Ask the witnesses to cosign the newest checkpoint (one that was down is asked
    again); print the cosigned note."""
    click.echo(_cosign(db, _policy(witnesses)).decode(), nl=False)


@log.command("vkey")
@db_option
def log_vkey(db: str | None) -> None:
    """Print the log's verifier key (C2SP vkey, named by the origin) for a
    tlog-policy `log` line or a witness's `--logs` file."""
    from ledger.evidence.keys import active_ledger_key
    from ledger.transparency.checkpoints import origin
    from ledger.transparency.vkey import LOG_ED25519, VKey

    store = open_store(db)
    info = active_ledger_key(store.keys())
    click.echo(VKey(origin(store), LOG_ED25519, info.public).text())


@log.command("proof")
@click.argument("receipt")
@ask_server
@db_option
@json_option
def log_proof(receipt: str, server: str | None, db: str | None, as_json: bool) -> None:
    """Inclusion proof of an entry against the newest checkpoint (verified before printing)."""
    doc = open_reader(db, server).proof(receipt)
    if as_json:
        emit_json(doc)
        return
    click.echo(f"entry {doc['index']} of {doc['size']}, verified")
    for h in doc["proof"]:
        click.echo(f"  {h}")
    click.echo(doc["checkpoint"], nl=False)


# Sizes are bounded by the database's integer column (2^63 - 1), checked here.
_SIZE = click.IntRange(min=1, max=2**63 - 1)


@log.command("consistency")
@click.argument("old", type=_SIZE, required=False)
@click.argument("new", type=_SIZE, required=False)
@click.option(
    "--from",
    "from_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A checkpoint note you hold: prove it is a prefix of the log now.",
)
@ask_server
@db_option
@json_option
def log_consistency(
    old: int | None,
    new: int | None,
    from_file: Path | None,
    server: str | None,
    db: str | None,
    as_json: bool,
) -> None:
    """Consistency proof between checkpoints of sizes OLD and NEW (verified before printing).

    With --from FILE: between the checkpoint in FILE and the newest one; exit 1
    (both roots printed) when the log has forked or rolled back since FILE.
    """
    reader = open_reader(db, server)
    if from_file is not None and old is None:
        doc = reader.consistency_from(read_file(from_file))
    elif from_file is not None:
        raise UsageError("give OLD NEW or --from FILE, not both")
    else:
        doc = reader.consistency(old, new)
    if as_json:
        emit_json(doc)
        return
    click.echo(f"consistent: {doc['old']} -> {doc['new']}, {reader.verified}")
    for h in doc["proof"]:
        click.echo(f"  {h}")


@log.command("witness")
@click.option(
    "--state",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The witness's memory: the last checkpoint it accepted (created on first use).",
)
@server_option("Watch a `ledger serve` at URL instead of --db.")
@click.option(
    "--trust",
    type=click.Path(dir_okay=False, path_type=Path),
    multiple=True,
    help="Ledger key PEM (repeatable) checkpoints must be signed by (needed with --server).",
)
@click.option(
    "--policy",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A C2SP tlog-policy file: refuse (exit 1, naming the missing cosignatures) a "
    "checkpoint its witnesses' quorum has not cosigned.",
)
@db_option
def log_witness(
    state: Path, server: str | None, trust: tuple[Path, ...], policy: Path | None, db: str | None
) -> None:
    """Check the newest checkpoint against the last one seen; remember it if consistent.

    Exit 1, both roots printed, on a fork (another root at a size seen, or no
    consistency proof) or a rollback (a smaller size, or an older timestamp).
    """
    from ledger.evidence.keys import load_public_pem
    from ledger.transparency.witness import witness

    reader = open_reader(db, server, one=True)
    pems = [load_public_pem(read_file(p), str(p)) for p in trust]
    accept = None
    if policy is not None:
        from ledger.transparency.policy import parse_policy, witnessed_line

        rules = parse_policy(read_file(policy))
        pems += [log.vkey.public for log in rules.logs]

        def accept(note: bytes) -> str:
            return witnessed_line(rules, note)

    click.echo(witness(state, reader.witness_source(pems), accept))
