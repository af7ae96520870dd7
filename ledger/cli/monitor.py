"""`ledger monitor ...`: follow a log and report, per key, what its holder should hear of."""

from __future__ import annotations

from pathlib import Path

import click

from ledger.cli._common import db_option, keydir, open_reader, read_file, server_option
from ledger.evidence.errors import EXIT_NEGATIVE, UsageError


@click.group()
def monitor() -> None:
    """Watch the keys that sign into a log (docs/transparency.md)."""


@monitor.command("follow")
@click.option(
    "--state",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The position reached so far (made on first use: from the start of the log).",
)
@click.option(
    "--journal",
    "journals",
    multiple=True,
    metavar="KEY=FILE",
    help="A host's journal of what it signed, for key KEY (name or id; repeatable).",
)
@click.option(
    "--rate-multiple",
    type=click.FloatRange(min=1),
    default=5.0,
    show_default=True,
    help="Report an hour with more receipts than this times the key's median active hour.",
)
@click.option("--key", "key_name", required=True, help="The monitor's key (signs the report).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True)
@server_option("Follow a `ledger serve` at URL instead of --db.")
@click.option(
    "--trust",
    type=click.Path(dir_okay=False, path_type=Path),
    multiple=True,
    help="With --server: ledger key PEM (repeatable) its checkpoint must be signed by.",
)
@click.option(
    "--policy",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --server: a C2SP tlog-policy its checkpoint must meet (log key and quorum).",
)
@db_option
def follow(
    state: Path,
    journals: tuple[str, ...],
    rate_multiple: float,
    key_name: str,
    output: Path,
    server: str | None,
    trust: tuple[Path, ...],
    policy: Path | None,
    db: str | None,
) -> None:
    """Check the log's entries since --state and write a signed report.

    Over --server, the entries are read up to the served checkpoint and must
    hash to its signed root. One line per finding on stdout; exit 1 when
    there is any. The position advances only once the report is written."""
    import json
    from datetime import UTC, datetime

    from ledger.cli.files import write_atomically
    from ledger.evidence.keys import find_key, load_public_pem
    from ledger.monitor.report import sign_report
    from ledger.monitor.watch import scan
    from ledger.write.journal import read_journal

    if not output.absolute().parent.is_dir():
        raise UsageError(f"{output.parent}: no such directory")
    reader = open_reader(db, server, one=True)
    rules = None
    if policy is not None:
        from ledger.transparency.policy import parse_policy

        rules = parse_policy(read_file(policy))
    pems = [load_public_pem(read_file(p), str(p)) for p in trust]
    view = reader.log_view(pems, rules)
    log = view.origin
    start = 0
    if state.exists():
        held = json.loads(read_file(state))
        if held.get("origin") != log:
            raise UsageError(f"{state} follows {held.get('origin')}, not {log}")
        start = int(held["position"])
    given: dict[str, set[str]] = {}
    for spec in journals:
        ref, eq, path = spec.partition("=")
        if not eq or not path:
            raise UsageError(f"--journal {spec!r}: expected KEY=FILE")
        kid = find_key(view.keys, ref).keyid
        given[kid] = given.get(kid, set()) | read_journal(Path(path)).get(kid, set())
    key = keydir().load(key_name)
    if view.size < start:
        raise UsageError(f"the log has {view.size} entries, fewer than the {start} seen")
    result = scan(view, start, given, multiple=rate_multiple)
    root = view.root
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    write_atomically(output, sign_report(result, log, root, rate_multiple, now, key))
    tmp = state.with_name(state.name + ".part")
    tmp.write_text(json.dumps({"origin": log, "position": result.end}) + "\n")
    tmp.replace(state)
    for f in result.findings:
        click.echo(f"{f.check}: {f.key_name} ({f.keyid[:12]}) entry {f.seq} {f.entry}: {f.detail}")
    click.echo(
        f"entries {start}..{result.end}: {len(result.findings)} finding(s); report {output}",
        err=True,
    )
    if result.findings:
        raise SystemExit(EXIT_NEGATIVE)


@monitor.command("check")
@click.argument("report", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--trust",
    type=click.Path(dir_okay=False, path_type=Path),
    multiple=True,
    required=True,
    help="The monitor's public key PEM (repeatable).",
)
def check(report: Path, trust: tuple[Path, ...]) -> None:
    """Verify a monitor report's signature and print its findings."""
    from ledger.evidence.keys import load_public_pem
    from ledger.monitor.report import check_report

    doc = check_report(read_file(report), [load_public_pem(read_file(p), str(p)) for p in trust])
    pred = doc["predicate"]
    click.echo(
        f"verified monitor report on {pred['log']} entries {pred['from']}..{pred['to']}, "
        f"{len(pred['findings'])} finding(s)"
    )
    for f in pred["findings"]:
        click.echo(f"{f['check']}: {f['key']['name']} entry {f['seq']} {f['entry']}")
