"""What every importer shares: the claim map it is asked, the context it reads
in, the finding it returns per claim, and the import checks' parameters.

Apart from the package's `__init__` (which dispatches to the importers) so that
the importers import it and never the package that imports them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from ledger.evidence.models import Outcome
from ledger.identity.revision import Revision

__all__ = [
    "CHECKS",
    "FORMATS",
    "VERSION",
    "ClaimMap",
    "Context",
    "Finding",
    "params_error",
    "planned",
    "source_files",
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
        note: str | None = None,
    ) -> None:
        self.outcome = outcome
        # A pass carries no reason, only a `note` every surface must show with it
        # (an in-toto import whose signature was not verified).
        self.reason = reason if outcome != "passed" else note
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
        {
            "require_signature": (
                "bool",
                False,
                (),
                "true: only a statement whose signature verified with --trusted-key or "
                "--trusted-root can pass (unsigned or unverified: inconclusive)",
            ),
            "signer_identity": (
                "str",
                None,
                (),
                "an identity (a Sigstore certificate's subject alternative name, e.g. the "
                "workflow `https://github.com/ORG/REPO/.github/workflows/ci.yml@refs/heads/main`): "
                "only statements whose signature verified up to --trusted-root with a "
                "certificate naming it can pass (else inconclusive)",
            ),
        },
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
        if known[k][0] == "bool" and not isinstance(v, bool):
            return f"{check} parameter {k} must be true or false, got {v!r}"
        if known[k][0] == "str" and (not isinstance(v, str) or not v):
            return f"{check} parameter {k} must be a non-empty string, got {v!r}"
        if allowed and v not in allowed:
            return f"{check} parameter {k} must be one of {', '.join(allowed)}, got {v!r}"
    return None


def planned(check: str, params: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    """The check's parameters as the receipt records them: the plan's, else the defaults
    (a parameter without a default, such as `signer_identity`, only where the plan gives it,
    so receipts recorded without it read as before)."""
    _, known = CHECKS[check]
    return {
        k: params.get(k, spec[1]) for k, spec in known.items() if k in params or spec[1] is not None
    }


def source_files(path: Path) -> list[Path]:
    """The file itself, or a spool directory's `*.json` / `*.jsonl` files, by name."""
    if not path.is_dir():
        return [path]
    return sorted(p for p in path.iterdir() if p.is_file() and p.suffix in (".json", ".jsonl"))
