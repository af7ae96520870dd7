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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from ledger.errors import InputError
from ledger.models import Outcome
from ledger.revision import Revision
from ledger.statement import Facts

__all__ = [
    "CHECKS",
    "FORMATS",
    "ClaimMap",
    "Context",
    "Finding",
    "Imported",
    "facts_for",
    "import_source",
    "params_error",
]

ClaimMap = Sequence[tuple[str, str]]
"""(claim, pattern) pairs; the pattern selects a format's items for the claim."""

FORMATS = ("junit", "in-toto", "admission-events")

VERSION = "2"


@dataclass(frozen=True, slots=True)
class Context:
    """What an importer needs beyond the file: the revision the receipts speak of,
    each claim's planned parameters, and what the caller knows besides."""

    revision: Revision
    params: Mapping[str, Mapping[str, JsonValue]] = field(default_factory=dict)
    admitted: int | None = None
    """The run's count of admitted steps (admission events), when known."""
    trusted_keys: Sequence[Any] = ()
    """Public keys a signed source (DSSE, Sigstore bundle) is verified against."""
    trusted_roots: Sequence[Any] = ()
    """Root certificates a Sigstore bundle's signing certificate must chain to."""


class Finding:
    """One receipt's worth of what a source says."""

    def __init__(
        self,
        outcome: Outcome,
        reason: str | None,
        measurements: dict[str, Any],
        *,
        host: str = "",
        parameters: Mapping[str, JsonValue] | None = None,
    ) -> None:
        self.outcome = outcome
        self.reason = reason if outcome != "passed" else None
        self.measurements = measurements
        self.host = host
        self.parameters = dict(parameters or {})


# The checks a plan names for imported evidence: name -> (summary, parameters).
# Each parameter: (type, default, allowed values, meaning).
_Param = tuple[str, JsonValue, tuple[str, ...], str]
CHECKS: dict[str, tuple[str, dict[str, _Param]]] = {
    "import-junit": (
        "pytest's JUnit XML, imported with `ledger import junit` (docs/import.md)",
        {
            "skips": (
                "str",
                "allowed",
                ("allowed", "inconclusive"),
                "'allowed': skipped tests are listed and do not block a pass when at least "
                "one selected test ran; 'inconclusive': any skipped test makes it inconclusive",
            )
        },
    ),
    "import-in-toto": (
        "an in-toto test-result v0.1 Statement about this revision (bare, DSSE, "
        ".intoto.jsonl or Sigstore bundle), imported with `ledger import in-toto`",
        {},
    ),
    "import-admission-events": (
        "a memory planner's reports (ART planner-miss spool, formats 1 and 2), imported "
        "with `ledger import admission-events`: no OOM after admission, no under-prediction",
        {},
    ),
}


def params_error(check: str, params: Mapping[str, JsonValue]) -> str | None:
    """Why `params` are not valid for the import check, or None."""
    _, known = CHECKS[check]
    for k, v in params.items():
        if k not in known:
            return f"unknown parameter {k!r} for {check} (known: {', '.join(known) or 'none'})"
        allowed = known[k][2]
        if allowed and v not in allowed:
            return f"{check} parameter {k} must be one of {', '.join(allowed)}, got {v!r}"
    return None


def planned(check: str, params: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    """The check's parameters as the receipt records them: the plan's, else the defaults."""
    _, known = CHECKS[check]
    return {k: params.get(k, spec[1]) for k, spec in known.items()}


@dataclass(frozen=True, slots=True)
class Imported:
    facts: list[Facts]
    files: list[Path]
    """The source files, attached to every receipt by digest."""


def source_files(path: Path) -> list[Path]:
    """The file itself, or a spool directory's `*.json` / `*.jsonl` files, by name."""
    if not path.is_dir():
        return [path]
    return sorted(p for p in path.iterdir() if p.is_file() and p.suffix in (".json", ".jsonl"))


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
