"""The `ledger` command line. One error boundary: `main`."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ledger import __version__
from ledger.errors import Error, InputError, UsageError

if TYPE_CHECKING:  # the CLI imports its machinery lazily, so `--help` starts fast
    from ledger.keys import KeyDir
    from ledger.store.store import Store

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK, EXIT_NEGATIVE, EXIT_USAGE = 0, 1, 2


def db_option(f: F) -> F:
    return click.option(
        "--db",
        metavar="URL",
        help="SQLAlchemy URL or SQLite path (default: $LEDGER_DB, else ./.ledger/ledger.db).",
    )(f)


def plan_option(f: F) -> F:
    return click.option(
        "--plan",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Plan file (default: qualification.toml as committed at the revision).",
    )(f)


def json_option(f: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print one JSON document on stdout."
    )(f)


def emit_json(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2, sort_keys=False))


def _store(db: str | None) -> Store:
    from ledger.store.store import Store, resolve_url

    return Store.open(resolve_url(db))


def _keydir() -> KeyDir:
    from ledger.keys import KeyDir

    return KeyDir.default()


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="ledger")
def cli() -> None:
    """Signed, append-only qualification receipts for GPU training code.

    Runners and harnesses write signed receipts about a source revision;
    `status` answers which claims are qualified for it, at which scope, on
    what evidence; `verify` checks any receipt offline.

    Exit codes: 0 success/qualified/verified, 1 a definite negative (not
    qualified, verification failed, input refused), 2 usage or environment error.
    """


# -- init and keys -------------------------------------------------------------------


@cli.command()
@db_option
def init(db: str | None) -> None:
    """Create the ledger (or migrate an older one) and its ledger key."""
    from ledger.ingest import register_key
    from ledger.store.store import Store, resolve_url

    url = resolve_url(db)
    store = Store.create(url)
    keys = _keydir()
    have = [k for k in store.keys().values() if k.role == "ledger" and k.revoked_seq is None]
    if have:
        click.echo(f"ledger at {url} is up to date; ledger key {have[0].name} {have[0].keyid[:16]}")
        return
    name = "ledger"
    local = keys.load(name) if keys.file(name).exists() else keys.create(name)
    kid, _ = register_key(store, name, "ledger", local.public)
    click.echo(f"created ledger at {url}")
    click.echo(f"ledger key {name} {kid} (private key {keys.file(name)})")


@cli.group()
def keys() -> None:
    """Ed25519 keys: runner, reviewer and ledger roles. Private keys stay in $LEDGER_KEYS."""


@keys.command("new")
@click.argument("name")
@click.option("--role", type=click.Choice(["runner", "reviewer"]), required=True)
@db_option
def keys_new(name: str, role: str, db: str | None) -> None:
    """Make a key pair (private key mode 0600 in $LEDGER_KEYS) and register its public key."""
    from ledger.ingest import register_key

    store = _store(db)
    kd = _keydir()
    local = kd.create(name)
    kid, _ = register_key(store, name, role, local.public)  # type: ignore[arg-type]
    click.echo(kid)
    click.echo(f"private key: {kd.file(name)}", err=True)


@keys.command("add")
@click.argument("pem", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--name", required=True)
@click.option("--role", type=click.Choice(["runner", "reviewer", "ledger"]), required=True)
@db_option
def keys_add(pem: Path, name: str, role: str, db: str | None) -> None:
    """Register someone else's public key (PEM) under a name and role."""
    from ledger.ingest import register_key
    from ledger.keys import load_public_pem

    public = load_public_pem(_read(pem), str(pem))
    kid, new = register_key(_store(db), name, role, public)  # type: ignore[arg-type]
    click.echo(kid if new else f"{kid} (already registered)")


@keys.command("list")
@db_option
@json_option
def keys_list(db: str | None, as_json: bool) -> None:
    """Registered keys with role and revocation state."""
    store = _store(db)
    local = set(_keydir().names())
    rows: list[dict[str, Any]] = [
        {
            "keyid": k.keyid,
            "name": k.name,
            "role": k.role,
            "revoked": k.revoked_seq is not None,
            "revoked_reason": k.revoked_reason,
            "private_key_here": k.name in local,
        }
        for k in store.keys().values()
    ]
    if as_json:
        emit_json(rows)
        return
    for r in rows:
        state = f"revoked: {r['revoked_reason']}" if r["revoked"] else "active"
        mine = " (private key here)" if r["private_key_here"] else ""
        click.echo(f"{r['keyid'][:16]}  {r['role']:<8}  {r['name']:<16}  {state}{mine}")


@keys.command("export")
@click.argument("name")
@db_option
def keys_export(name: str, db: str | None) -> None:
    """Print a registered key's public PEM (for `verify --trust` and `keys add` elsewhere)."""
    from ledger.keys import public_pem

    store = _store(db)
    live = [
        k for k in store.keys().values() if name in (k.name, k.keyid) or k.keyid.startswith(name)
    ]
    if len(live) != 1:
        raise UsageError(f"{name!r} matches {len(live)} registered keys; give a name or key id")
    click.echo(public_pem(live[0].public).decode(), nl=False)


@keys.command("revoke")
@click.argument("keyid")
@click.option("--reason", required=True, help="Why; recorded in the log.")
@db_option
def keys_revoke(keyid: str, reason: str, db: str | None) -> None:
    """Revoke a key: anything it signs that is logged afterwards does not count."""
    from ledger.ingest import revoke_key

    info = revoke_key(_store(db), keyid, reason)
    click.echo(f"revoked {info.name} {info.keyid}")


# -- writing ---------------------------------------------------------------------------


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path} does not exist") from None
    except OSError as e:
        raise UsageError(f"{path}: {e.strerror}") from None


def _rev_options(f: F) -> F:
    f = click.option(
        "--repo",
        type=click.Path(file_okay=False, path_type=Path),
        help="Repository (default: the current one).",
    )(f)
    f = click.option("--rev", metavar="REV", help="A commit, branch or tag.")(f)
    f = click.option(
        "--pr",
        type=click.IntRange(min=1),
        metavar="N",
        help="Pull request N: its current head (refs/pull/N/head, fetched when missing).",
    )(f)
    return f


@cli.command()
@click.option("--claim", required=True, help="What is asserted, e.g. admission.no-oom-after-admit.")
@_rev_options
@click.option(
    "--outcome",
    type=click.Choice(["passed", "failed", "inconclusive", "refused", "infra-error"]),
    required=True,
)
@click.option("--reason", help="Required for anything but passed: one sentence.")
@click.option("--check", "check_name", help="Check name (default: the claim).")
@click.option("--check-version", default="1", show_default=True)
@click.option(
    "--param", "params", multiple=True, metavar="K=V", help="Check parameter (repeatable)."
)
@click.option(
    "--scope",
    "scope",
    multiple=True,
    metavar="K=V",
    help="Scope facet (repeatable): device_kind=cuda, gpu_model=..., dtype=...",
)
@click.option(
    "--measurements",
    type=click.Path(dir_okay=False, path_type=Path),
    help="JSON object of measurements (bytes and ns as integers).",
)
@click.option(
    "--artifact",
    "artifacts",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="File to store content-addressed and reference (repeatable).",
)
@click.option("--observer", type=click.Choice(["on", "off"]), default="off", show_default=True)
@click.option(
    "--cleanup",
    type=click.Path(dir_okay=False, path_type=Path),
    help='JSON {"complete": bool, "resources": [{"kind","id","released","proof"}]}.',
)
@click.option(
    "--supersedes",
    "supersedes",
    multiple=True,
    metavar="ID",
    help="Receipt this one replaces (needs --supersedes-reason).",
)
@click.option("--supersedes-reason", help="Why the superseded receipts no longer stand.")
@click.option("--key", "key_name", required=True, help="Runner key name in $LEDGER_KEYS.")
@plan_option
@click.option(
    "--server", metavar="URL", help="Record through a `ledger serve` at URL instead of --db."
)
@db_option
def attest(
    claim: str,
    pr: int | None,
    rev: str | None,
    repo: Path | None,
    outcome: str,
    reason: str | None,
    check_name: str | None,
    check_version: str,
    params: Sequence[str],
    scope: Sequence[str],
    measurements: Path | None,
    artifacts: Sequence[Path],
    observer: str,
    cleanup: Path | None,
    supersedes: Sequence[str],
    supersedes_reason: str | None,
    key_name: str,
    plan: Path | None,
    server: str | None,
    db: str | None,
) -> None:
    """Sign and record a receipt from another harness's result.

    Commit, tree, parents, PR, merge-base, dirty flag and package identity are
    read from the repository; the rest comes from the options. Prints the id.
    """
    from ledger import source as src
    from ledger.attest import (
        Facts,
        artifact_of,
        build_statement,
        load_json_file,
        parse_scope,
        record_statement,
    )
    from ledger.models import Supersedes

    if server and db:
        raise UsageError("give --server or --db, not both")
    if server and artifacts:
        raise UsageError("--artifact needs --db: a ledger server does not store artifact contents")
    store: Store | None = None if server else _store(db)
    key = _keydir().load(key_name)
    if supersedes and not supersedes_reason:
        raise UsageError("--supersedes needs --supersedes-reason")
    meas = load_json_file(measurements, "measurements") if measurements else {}
    if not isinstance(meas, dict):
        raise InputError("measurements file must hold a JSON object")
    clean = load_json_file(cleanup, "cleanup") if cleanup else None
    if clean is not None and not isinstance(clean, dict):
        raise InputError("cleanup file must hold a JSON object")
    if server:
        from ledger.client import fetch_entry

        sup_ids = [fetch_entry(server, s)["id"] for s in supersedes]
    else:
        assert store is not None
        sup_ids = [store.resolve(s).entry_id for s in supersedes]
    sup = [Supersedes(id=i, reason=supersedes_reason or "") for i in sup_ids]
    repository = src.open_repo(repo)
    revision = src.with_package(repository, src.resolve(repository, rev=rev, pr=pr), plan)
    facts = Facts(
        claim=claim,
        check=check_name or claim,
        check_version=check_version,
        parameters=parse_scope(params),
        scope=parse_scope(scope),
        outcome=outcome,  # type: ignore[arg-type]
        reason=reason,
        measurements=meas,
        observer="on" if observer == "on" else "off",
        cleanup=clean,
        artifacts=[artifact_of(store, a) for a in artifacts],
        supersedes=sup,
    )
    stmt = build_statement(revision.source(), facts)
    if server:
        from ledger.attest import sign_statement
        from ledger.client import post_envelopes

        [doc] = post_envelopes(server, [sign_statement(stmt, key)])
        rid = str(doc["id"])
    else:
        assert store is not None
        [rec] = record_statement(store, [stmt], key)
        rid = rec.id
    if revision.dirty:
        click.echo(
            "warning: the work tree is dirty; recorded as dirty (it will not qualify the commit)",
            err=True,
        )
    click.echo(rid)


@cli.command()
@click.argument(
    "envelopes", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path)
)
@db_option
@json_option
def record(envelopes: Sequence[Path], db: str | None, as_json: bool) -> None:
    """Verify and record signed envelopes (all or nothing)."""
    from ledger.ingest import record as do_record

    recs = do_record(_store(db), [_read(p) for p in envelopes])
    if as_json:
        emit_json(
            [{"id": r.id, "kind": r.kind, "seq": r.seq, "duplicate": r.duplicate} for r in recs]
        )
        return
    for r in recs:
        click.echo(
            f"{r.id} already recorded (no change)"
            if r.duplicate
            else f"{r.id} recorded as entry {r.seq}"
        )


@cli.command()
@click.argument("receipt")
@click.option("--concur", "verdict", flag_value="concur", help="Agree with the receipt.")
@click.option(
    "--dispute", "verdict", flag_value="dispute", help="Dispute it: its claim stops qualifying."
)
@click.option("--note", default="", help="What was checked, or why it is disputed.")
@click.option("--key", "key_name", required=True, help="Reviewer key name in $LEDGER_KEYS.")
@db_option
def review(receipt: str, verdict: str | None, note: str, key_name: str, db: str | None) -> None:
    """Countersign (or dispute) a receipt with a reviewer key other than its signer."""
    from ledger.attest import record_review

    if verdict is None:
        raise UsageError("give --concur or --dispute")
    store = _store(db)
    entry = store.resolve(receipt)
    if entry.kind != "receipt":
        raise InputError(f"{receipt} is a {entry.kind}, not a receipt")
    key = _keydir().load(key_name)
    if store.receipt_signer(entry.entry_id) == key.keyid:
        raise InputError("a reviewer cannot review a receipt it signed itself")
    rec = record_review(
        store, entry.entry_id, "dispute" if verdict == "dispute" else "concur", note, key
    )
    click.echo(rec.id)


@cli.command()
@_rev_options
@plan_option
@click.option(
    "--claim",
    "claims",
    multiple=True,
    metavar="NAME",
    help="Run only these plan claims (repeatable).",
)
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default="auto",
    show_default=True,
    help="auto: CUDA when a GPU is present, else CPU.",
)
@click.option(
    "--key",
    "key_name",
    default="runner",
    show_default=True,
    help="Runner key name in $LEDGER_KEYS.",
)
@click.option(
    "--server",
    metavar="URL",
    help="Record through a `ledger serve` at URL instead of --db (prints no status table).",
)
@db_option
@json_option
def qualify(
    pr: int | None,
    rev: str | None,
    repo: Path | None,
    plan: Path | None,
    claims: Sequence[str],
    device: str,
    key_name: str,
    server: str | None,
    db: str | None,
    as_json: bool,
) -> None:
    """Run the plan's checks on a revision; record one signed receipt per check and scope.

    The revision is checked out into a temporary worktree (removed afterwards);
    plan and workload come from it. Progress goes to stderr; the receipt ids and
    the status table (or --json) to stdout. Exit 0 only when every required
    claim ends qualified.
    """
    from ledger.qualification import render_table
    from ledger.qualify import qualify as run_plan
    from ledger.status import query_status

    if server and db:
        raise UsageError("give --server or --db, not both")
    store = None if server else _store(db)
    key = _keydir().load(key_name)
    t0 = time.monotonic()

    def progress(msg: str) -> None:
        click.echo(f"{time.monotonic() - t0:7.1f}s  {msg}", err=True)

    result = run_plan(
        store,
        key,
        repo_path=repo,
        rev=rev,
        pr=pr,
        plan_file=plan,
        claims=claims,
        device="cuda" if device == "cuda" else "cpu" if device == "cpu" else "auto",
        progress=progress,
        server=server,
    )
    if store is None:
        # Status needs the ledger's rows; a server client has only the receipts
        # it just recorded, so it reports those and leaves qualification to
        # `ledger status` where the database is.
        if as_json:
            emit_json(
                {
                    "receipts": [
                        {"id": i, "claim": c, "outcome": o} for i, c, o in result.receipts
                    ],
                    "status": None,
                }
            )
        else:
            for i, c, o in result.receipts:
                click.echo(f"{i}  {c}  {o}")
        click.echo(
            f"recorded at {server}; whether the claims qualify: `ledger status` on that ledger",
            err=True,
        )
        if any(o != "passed" for _, _, o in result.receipts):
            raise SystemExit(EXIT_NEGATIVE)
        return
    q = result.query()
    report = query_status(store, q, claims=claims, scope={})
    if as_json:
        emit_json(
            {
                "receipts": [{"id": i, "claim": c, "outcome": o} for i, c, o in result.receipts],
                "status": report.to_json(),
            }
        )
    else:
        for i, c, o in result.receipts:
            click.echo(f"{i}  {c}  {o}")
        click.echo()
        click.echo(render_table(report), nl=False)
    if not report.qualified:
        raise SystemExit(EXIT_NEGATIVE)


# -- reading ---------------------------------------------------------------------------


@cli.command()
@_rev_options
@click.option(
    "--claim",
    "claims",
    multiple=True,
    metavar="NAME",
    help="Ask about these claims only (repeatable); also claims absent from the plan.",
)
@click.option(
    "--scope",
    "scope",
    multiple=True,
    metavar="K=V",
    help="Required scope facet (repeatable), added to each claim's plan scope.",
)
@plan_option
@db_option
@json_option
def status(
    pr: int | None,
    rev: str | None,
    repo: Path | None,
    claims: Sequence[str],
    scope: Sequence[str],
    plan: Path | None,
    db: str | None,
    as_json: bool,
) -> None:
    """Which claims are qualified for a revision, at which scope, on what evidence.

    For --pr N, the PR's current head is asked about; evidence on earlier heads
    counts only where the plan's carry-over (tree or package identity) allows,
    and shows as stale otherwise. Exit 0 only when every required claim is
    qualified at the requested scope.
    """
    from ledger.attest import parse_scope
    from ledger.qualification import render_table
    from ledger.status import query_status, resolve_query

    store = _store(db)
    q = resolve_query(repo, rev=rev, pr=pr, plan_file=plan)
    report = query_status(store, q, claims=claims, scope=parse_scope(scope))
    if as_json:
        emit_json(report.to_json())
    else:
        click.echo(render_table(report), nl=False)
    if not report.qualified:
        raise SystemExit(EXIT_NEGATIVE)


@cli.command()
@_rev_options
@plan_option
@db_option
@json_option
def history(
    pr: int | None,
    rev: str | None,
    repo: Path | None,
    plan: Path | None,
    db: str | None,
    as_json: bool,
) -> None:
    """Every statement and review about a revision, in log order; superseded ones marked."""
    from ledger.status import query_history, resolve_query

    store = _store(db)
    q = resolve_query(repo, rev=rev, pr=pr, plan_file=plan)
    items = query_history(store, q)
    if as_json:
        emit_json({"subject": q.revision.to_json(), "entries": [i.to_json() for i in items]})
        return
    from ledger.render import render_history

    click.echo(render_history(q.revision.to_json(), [i.to_json() for i in items]), nl=False)


@cli.command()
@click.argument("receipt")
@db_option
@json_option
def show(receipt: str, db: str | None, as_json: bool) -> None:
    """Show a receipt or review: its statement, signer and reviews."""
    from ledger.entries import show_document

    doc = show_document(_store(db), receipt)
    if as_json:
        emit_json(doc)
        return
    from ledger.render import render_show

    click.echo(render_show(doc))


@cli.command()
@click.argument("target")
@click.option(
    "--trust",
    "trust",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Trusted public key PEM (repeatable): the ledger key, or the signer's.",
)
@db_option
@json_option
def verify(target: str, trust: Sequence[str], db: str | None, as_json: bool) -> None:
    """Verify a receipt: a bundle FILE offline (with --trust), or an ID against the ledger."""
    from ledger.keys import load_public_pem

    path = Path(target)
    if path.is_file():
        from ledger.bundle import verify_bundle

        anchors = [load_public_pem(_read(Path(t)), str(t)) for t in trust]
        rep = verify_bundle(_read(path), anchors)
        doc = {
            "verified": True,
            "id": rep.id,
            "kind": rep.kind,
            "anchor": rep.anchor,
            "log": {"origin": rep.log_origin, "size": rep.log_size},
            "signer": rep.signer,
            "claim": rep.statement.get("predicate", {}).get("claim"),
            "outcome": rep.statement.get("predicate", {}).get("outcome"),
            "reviews": rep.reviews,
            "unanchored_reviews": rep.unanchored_reviews,
            "reviews_as_of_log_size": rep.log_size,
        }
    else:
        from ledger.verify import verify_in_ledger

        doc = verify_in_ledger(_store(db), target)
    if as_json:
        emit_json(doc)
        return
    click.echo(f"verified {doc['id']}")
    for k, v in doc.items():
        if k not in ("verified", "id", "reviews", "unanchored_reviews"):
            click.echo(f"  {k}: {v}")
    for r in doc.get("reviews", []):
        click.echo(f"  review {r['id'][:19]}: {r['verdict']} by {r['signer'][:12]}")
    for r in doc.get("unanchored_reviews", []):
        click.echo(
            f"  unanchored review {r['id'][:19]}: {r['verdict']} by {r['signer'][:12]}"
            " (its log is not vouched for by a trusted ledger key; not counted)"
        )


@cli.command()
@click.argument("receipt")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True)
@db_option
def export(receipt: str, output: Path, db: str | None) -> None:
    """Write a self-contained bundle that `ledger verify FILE --trust PEM` checks offline."""
    from ledger.bundle import export as do_export

    data = do_export(_store(db), receipt, _keydir())
    tmp = output.with_name(output.name + ".part")
    tmp.write_bytes(data)
    tmp.replace(output)
    click.echo(f"wrote {output} ({len(data)} bytes)")


@cli.command()
@db_option
@json_option
def audit(db: str | None, as_json: bool) -> None:
    """Recompute every entry hash, signature, sequence number and checkpoint root."""
    from ledger.audit import audit as do_audit

    rep = do_audit(_store(db))
    if as_json:
        emit_json(
            {
                "ok": rep.ok,
                "entries": rep.entries,
                "checkpoints": rep.checkpoints,
                "root": rep.root,
                "problems": rep.problems,
            }
        )
    else:
        for p in rep.problems:
            click.echo(p)
        click.echo(
            f"{rep.entries} entries, {rep.checkpoints} checkpoints, root {rep.root}: "
            + ("ok" if rep.ok else f"{len(rep.problems)} problems")
        )
    if not rep.ok:
        raise SystemExit(EXIT_NEGATIVE)


@cli.command()
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

    run_server(resolve_url(db), host, port, _keydir())


@cli.group()
def log() -> None:
    """The transparency log: checkpoints, inclusion and consistency proofs."""


@log.command("checkpoint")
@db_option
def log_checkpoint(db: str | None) -> None:
    """Sign a checkpoint of the log as it is now (with the ledger key)."""
    from ledger.log import checkpoint

    click.echo(checkpoint(_store(db), _keydir()).decode(), nl=False)


@log.command("proof")
@click.argument("receipt")
@db_option
@json_option
def log_proof(receipt: str, db: str | None, as_json: bool) -> None:
    """Inclusion proof of an entry against the newest checkpoint (verified before printing)."""
    from ledger.log import inclusion

    store = _store(db)
    e = store.resolve(receipt)
    inc = inclusion(store, e.seq, _keydir())
    proof = [h.hex() for h in inc.proof]
    doc = {
        "id": e.entry_id,
        "index": inc.index,
        "size": inc.size,
        "proof": proof,
        "checkpoint": inc.note.decode(),
    }
    if as_json:
        emit_json(doc)
        return
    click.echo(f"entry {inc.index} of {inc.size}, verified")
    for h in proof:
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

    proof = consistency(_store(db), old, new)
    if as_json:
        emit_json({"old": old, "new": new, "proof": [h.hex() for h in proof]})
        return
    click.echo(f"consistent: {old} -> {new}, verified")
    for h in proof:
        click.echo(f"  {h.hex()}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: runs the CLI and maps every error to a one-line reason and an exit code."""
    try:
        cli.main(
            args=list(argv) if argv is not None else None, prog_name="ledger", standalone_mode=False
        )
    except Error as e:
        click.echo(f"ledger: {e.reason()}", err=True)
        return e.exit_code
    except click.exceptions.Abort:
        click.echo("ledger: aborted", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return EXIT_USAGE
    except SystemExit as e:
        return int(e.code or 0) if isinstance(e.code, int) else EXIT_USAGE
    except Exception as e:
        # Database failures are environment errors: one line, not a traceback.
        from sqlalchemy.exc import SQLAlchemyError

        if not isinstance(e, SQLAlchemyError):
            raise
        orig = getattr(e, "orig", None) or e
        click.echo(f"ledger: database error: {str(orig).strip().splitlines()[0]}", err=True)
        return EXIT_USAGE
    except KeyboardInterrupt:
        click.echo("ledger: interrupted; nothing half-written was recorded", err=True)
        return 130
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
