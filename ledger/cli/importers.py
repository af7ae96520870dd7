"""`ledger import FORMAT PATH`: receipts from evidence in a team's own format."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ledger.cli._common import keydir
from ledger.cli.run import exit_for, target_options
from ledger.evidence.errors import InputError, UsageError

if TYPE_CHECKING:
    from ledger.write.attest import Target

_FORMATS = ("junit", "in-toto", "admission-events")


def _claims(given: str) -> list[tuple[str, str]]:
    """``NAME`` (everything in the file) or ``NAME=PATTERN`` (what the pattern selects)."""
    name, sep, pattern = given.partition("=")
    if not name:
        raise click.BadParameter(f"{given!r}: empty claim name", param_hint="--claim")
    return [(name, pattern if sep else "*")]


def _admitted(admitted: int | None, manifest: Path | None) -> int | None:
    """The run's count of admitted steps: --admitted N, or a manifest's `admitted`."""
    if manifest is None:
        return admitted
    if admitted is not None:
        raise UsageError("give --admitted or --manifest, not both")
    try:
        doc = json.loads(manifest.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise InputError(f"{manifest}: not a JSON manifest: {e}") from None
    n = doc.get("admitted_steps", doc.get("admitted")) if isinstance(doc, dict) else None
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise InputError(f"{manifest}: needs 'admitted_steps', a whole number of admitted steps")
    return n


@click.command("import")
@click.argument("fmt", metavar="FORMAT", type=click.Choice(_FORMATS))
@click.argument("file", metavar="PATH", type=click.Path(exists=True, path_type=Path))
@target_options
@click.option(
    "--also",
    "more",
    multiple=True,
    metavar="NAME=PATTERN",
    help="Another claim from the same file, over the items PATTERN selects (repeatable): "
    "JUnit test ids ('classname::name' or a pytest node id), in-toto test names, "
    "admission reports' phase. All the claims are recorded, or none.",
)
@click.option(
    "--admitted",
    type=click.IntRange(min=0),
    metavar="N",
    help="admission-events: the run's count of admitted steps (a spool holds only misses).",
)
@click.option(
    "--manifest",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="admission-events: a JSON file whose 'admitted_steps' is that count.",
)
@click.option(
    "--trusted-key",
    "trusted",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="in-toto: a PEM public key (Ed25519 or ECDSA) the envelope or Sigstore bundle "
    "must verify with (repeatable); without one the signature is recorded as not verified.",
)
@click.option(
    "--trusted-root",
    "roots",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="in-toto: root certificates (PEM, or a Sigstore trusted_root.json) a Sigstore "
    "bundle's signing certificate must chain to (repeatable).",
)
@click.option(
    "--allow-dirty", is_flag=True, help="Record against a dirty work tree (marked dirty)."
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
    offline: bool,
    more: Sequence[str],
    admitted: int | None,
    manifest: Path | None,
    trusted: Sequence[Path],
    roots: Sequence[Path],
    allow_dirty: bool,
) -> None:
    """Sign receipts from PATH in FORMAT: one per claim, the source attached by digest.

    PATH is a file; for admission-events also a JSON-lines file or a spool
    directory. --claim NAME takes everything; NAME=PATTERN an exact item, else
    what the fnmatch PATTERN selects (selecting nothing is refused). Every input
    is checked first, and the claims are recorded together or not at all.
    docs/import.md gives each format's mapping. Prints one receipt id per line;
    exits 0 when every receipt passed, 1 when one failed, was inconclusive or
    refused, 3 when every one that did not pass is an infra-error.
    """
    from ledger.fleet.ci import ci_job
    from ledger.importers import Context, import_source
    from ledger.importers.intoto import load_trusted_key
    from ledger.importers.sigstore import load_roots
    from ledger.write.attest import record_all, target
    from ledger.write.record import open_recorder

    claims = _checked_options(fmt, (claim, *more), pr, rev, admitted, manifest, trusted, roots)
    names = [n for n, _ in claims]
    count = _admitted(admitted, manifest)
    keys = [load_trusted_key(p) for p in trusted]
    root_certs = [c for p in roots for c in load_roots(p)]
    recorder = open_recorder(db, server)
    key = keydir().load(key_name)
    tgt = target(
        names,
        repo_path=repo,
        rev=rev,
        pr=pr,
        plan_file=plan,
        unplanned=unplanned,
        allow_dirty=allow_dirty,
        offline=offline,
    )
    _refuse_other_checks(tgt, f"import-{fmt}")
    params = {n: dict(s.params) for n, s in tgt.specs.items() if s is not None}
    ctx = Context(tgt.revision, params, admitted=count, trusted_keys=keys, trusted_roots=root_certs)
    found = import_source(fmt, file, claims, ctx)
    # The importer's job, never the one that produced the file (whose word, where the
    # format carries it, stays in the measurements): `ledger.fleet.ci`.
    job = ci_job(os.environ)
    facts = [dataclasses.replace(f, environment={**f.environment, **job}) for f in found.facts]
    # A server stores no artifact contents: the digest is then in the measurements.
    recs = record_all(
        recorder,
        key,
        tgt,
        facts,
        artifact_paths=found.files if recorder.stores_artifacts else [],
    )
    for one, rec in zip(facts, recs, strict=True):
        # One line per claim: the detail (a failure's diff) is in the measurements.
        note = "" if one.outcome == "passed" else f": {_one_line(one.reason)}"
        click.echo(f"{one.claim}: {one.outcome} (imported from {fmt}){note}", err=True)
        click.echo(rec.id)
    exit_for([f.outcome for f in facts])


def _checked_options(
    fmt: str,
    given: Sequence[str],
    pr: int | None,
    rev: str | None,
    admitted: int | None,
    manifest: Path | None,
    trusted: Sequence[Path],
    roots: Sequence[Path],
) -> list[tuple[str, str]]:
    """The options refused before anything is read; the claims, each given once."""
    if (pr is None) == (rev is None):
        raise click.UsageError("give exactly one of --pr N or --rev R")
    if (admitted is not None or manifest is not None) and fmt != "admission-events":
        raise click.UsageError("--admitted and --manifest are for admission-events")
    if (trusted or roots) and fmt != "in-toto":
        raise click.UsageError("--trusted-key and --trusted-root are for in-toto")
    claims = [c for one in given for c in _claims(one)]
    names = [n for n, _ in claims]
    if len(set(names)) != len(names):
        raise click.UsageError("each claim may be given once")
    return claims


def _refuse_other_checks(tgt: Target, check: str) -> None:
    """A plan claim this format does not check is refused; nothing is recorded."""
    for name, spec in tgt.specs.items():
        if spec is not None and spec.check != check:
            raise InputError(
                f"plan claim {name} is checked by {spec.check!r}, not {check!r}; nothing recorded"
            )


def _one_line(reason: str | None) -> str:
    from ledger.read.humanize import figures

    flat = " ".join(figures(reason or "").split())
    return flat if len(flat) <= 200 else flat[:199] + "…"


__all__ = ["import_"]
