"""Evidence teams already have, as receipts: JUnit XML, in-toto test results, admission events.

Each importer reads one source (a file, or for admission events a spool
directory) and returns the facts of one receipt per claim it is asked for. An
imported receipt says so (``imported_from`` in its parameters, ``imported``
in its measurements), carries the source files' digests as artifacts (the
caller attaches them), has no cleanup proof (the source holds none), and
never claims more than the source says. docs/import.md states each mapping.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.evidence.errors import InputError
from ledger.evidence.statement import Facts
from ledger.importers.reader import (
    CHECKS,
    FORMATS,
    VERSION,
    ClaimMap,
    Context,
    Finding,
    params_error,
    planned,
    source_files,
)

__all__ = [
    "CHECKS",
    "FORMATS",
    "VERSION",
    "ClaimMap",
    "Context",
    "Finding",
    "Imported",
    "facts_for",
    "import_source",
    "params_error",
    "planned",
    "source_files",
]


@dataclass(frozen=True, slots=True)
class Imported:
    facts: list[Facts]
    files: list[Path]
    """The source files, attached to every receipt by digest."""


def _digest(files: Sequence[Path], root: Path) -> str:
    if files == [root]:
        return hashlib.sha256(root.read_bytes()).hexdigest()
    # A directory: the digest of its `sha256sum`-style listing, in name order.
    listing = "".join(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.name}\n" for f in files)
    return hashlib.sha256(listing.encode()).hexdigest()


def facts_for(claim: str, fmt: str, path: Path, found: Finding, files: Sequence[Path]) -> Facts:
    imported: dict[str, Any] = {
        "format": fmt,
        "file": path.name,
        "sha256": _digest(files, path),
    }
    if path.is_dir():
        imported["files"] = len(files)
    return Facts(
        claim=claim,
        check=f"import-{fmt}",
        check_version=VERSION,
        parameters={"imported_from": fmt, **found.parameters},
        # The source says nothing about where it ran beyond what it names itself.
        scope={"imported_from": fmt},
        outcome=found.outcome,
        reason=found.reason,
        measurements={"imported": imported, **found.measurements},
        observer="off",
        cleanup=None,
        artifacts=[],
        supersedes=[],
        host=found.host,
    )


Reader = Callable[[Path, ClaimMap, Context], dict[str, Finding]]


def _formats() -> Mapping[str, Reader]:
    from ledger.importers import events, intoto, junit

    return {"junit": junit.read, "in-toto": intoto.read, "admission-events": events.read}


def import_source(fmt: str, path: Path, claims: ClaimMap, ctx: Context) -> Imported:
    """The facts of one receipt per claim, in the order the claims were given."""
    if path.is_dir() and fmt != "admission-events":
        raise InputError(f"{path}: a directory; {fmt} is imported from one file")
    for claim, _ in claims:
        bad = params_error(f"import-{fmt}", ctx.params.get(claim, {}))
        if bad:
            raise InputError(f"plan claim {claim}: {bad}")
    files = source_files(path)
    found = _formats()[fmt](path, claims, ctx)
    return Imported([facts_for(c, fmt, path, found[c], files) for c, _ in claims], files)
