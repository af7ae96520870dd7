"""Evidence teams already have, as receipts: JUnit XML, in-toto test results, admission events.

Each importer reads one file and returns the facts of one receipt per claim
it is asked for. An imported receipt says so (``imported_from`` in its
parameters, ``imported`` in its measurements), carries the source file's
digest as an artifact (the caller attaches the file), has no cleanup proof
(the source holds none), and never claims more than the source says: a
skipped or warned test is not a pass. docs/import.md states each mapping.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ledger.models import Outcome
from ledger.statement import Facts

__all__ = ["FORMATS", "ClaimMap", "Finding", "facts_for", "import_file"]

ClaimMap = Sequence[tuple[str, str]]
"""(claim, pattern) pairs; the pattern (fnmatch) selects a format's items for the claim."""


class Finding:
    """One receipt's worth of what a source file says."""

    def __init__(
        self,
        outcome: Outcome,
        reason: str | None,
        measurements: dict[str, Any],
        *,
        host: str = "",
    ) -> None:
        self.outcome = outcome
        self.reason = reason if outcome != "passed" else None
        self.measurements = measurements
        self.host = host


def facts_for(claim: str, fmt: str, path: Path, found: Finding) -> Facts:
    content = path.read_bytes()
    return Facts(
        claim=claim,
        check=f"import-{fmt}",
        check_version="1",
        parameters={"imported_from": fmt},
        # The source says nothing about where it ran beyond what it names itself.
        scope={"imported_from": fmt},
        outcome=found.outcome,
        reason=found.reason,
        measurements={
            "imported": {
                "format": fmt,
                "file": path.name,
                "sha256": hashlib.sha256(content).hexdigest(),
            },
            **found.measurements,
        },
        observer="off",
        cleanup=None,
        artifacts=[],
        supersedes=[],
        host=found.host,
    )


def _formats() -> Mapping[str, Callable[[Path, ClaimMap], dict[str, Finding]]]:
    from ledger.importers import events, intoto, junit

    return {"junit": junit.read, "in-toto": intoto.read, "admission-events": events.read}


FORMATS = ("junit", "in-toto", "admission-events")


def import_file(fmt: str, path: Path, claims: ClaimMap) -> list[Facts]:
    """The facts of one receipt per claim, in the order the claims were given."""
    found = _formats()[fmt](path, claims)
    return [facts_for(claim, fmt, path, found[claim]) for claim, _ in claims]
