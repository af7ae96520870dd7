"""`ledger import FORMAT FILE`: receipts from evidence in a team's own format."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from ledger.cli._common import keydir
from ledger.cli.run import target_options

_FORMATS = ("junit", "in-toto", "admission-events")


def _claims(given: str) -> list[tuple[str, str]]:
    """``NAME`` (everything in the file) or ``NAME=PATTERN`` (what the pattern selects)."""
    name, sep, pattern = given.partition("=")
    if not name:
        raise click.BadParameter(f"{given!r}: empty claim name", param_hint="--claim")
    return [(name, pattern if sep else "*")]


@click.command("import")
@click.argument("fmt", metavar="FORMAT", type=click.Choice(_FORMATS))
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@target_options
@click.option(
    "--also",
    "more",
    multiple=True,
    metavar="NAME=PATTERN",
    help="Another claim from the same file, over the items PATTERN selects (repeatable): "
    "JUnit test ids 'classname::name', in-toto test names, event 'step' values.",
)
def import_(
    fmt: str,
    file: Path,
    claim: str,
    pr: int | None,
    rev: str | None,
    repo: Path | None,
    key_name: str,
    unplanned: bool,
    plan: Path | None,
    server: str | None,
    db: str | None,
    more: Sequence[str],
) -> None:
    """Sign receipts from FILE in FORMAT: one per claim, the file attached by digest.

    --claim NAME takes everything in the file; NAME=PATTERN only what the fnmatch
    PATTERN selects. Receipts say they were imported and never claim more than the
    source: a skipped or warned test is not a pass. docs/import.md gives each
    format's mapping. Prints one receipt id per line.
    """
    from ledger.attest import attest
    from ledger.importers import import_file
    from ledger.record import open_recorder

    if (pr is None) == (rev is None):
        raise click.UsageError("give exactly one of --pr N or --rev R")
    claims = [c for given in (claim, *more) for c in _claims(given)]
    names = [n for n, _ in claims]
    if len(set(names)) != len(names):
        raise click.UsageError("each claim may be given once")
    recorder = open_recorder(db, server)
    key = keydir().load(key_name)
    for facts in import_file(fmt, file, claims):
        rec = attest(
            recorder,
            key,
            facts,
            repo_path=repo,
            rev=rev,
            pr=pr,
            plan_file=plan,
            # A server stores no artifact contents: the digest is then in the measurements.
            artifact_paths=[file] if recorder.stores_artifacts else [],
            unplanned=unplanned,
        )
        note = "" if facts.outcome == "passed" else f": {facts.reason}"
        click.echo(f"{facts.claim}: {facts.outcome} (imported from {fmt}){note}", err=True)
        click.echo(rec.recorded.id)


__all__ = ["import_"]
