"""Failures a later version of their check no longer makes (superseded by the check's fix).

A check that judged wrongly leaves failed receipts behind that no rerun of the
same commit can lift: the old verdict stays in the log. Where a later version of
the check removes one failure, a receipt whose failure consisted *only* of it is
superseded by that fix: it no longer stands as a counterexample and counts as
inconclusive (neither way; a run of the fixed check decides). Every other
receipt keeps its verdict, including one that failed for that reason and another.

`FIXES` is the one table: which check, fixed in which version, the failure it
removes, and why. Which failure a receipt holds is read from its signed
measurements (and its reason only to confirm that it said nothing else), never
guessed from free text alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["FIXES", "CheckFix", "fixed_by", "superseded_text"]

_REGRESSION = "regression-24view"
_CONTROL = "observer-off-control"


@dataclass(frozen=True, slots=True)
class CheckFix:
    """One failure a check's later version removes."""

    check: str
    fixed_in: int
    """The first version of `check` that no longer makes the failure."""
    removes: str
    """The failure (a key of `_FAILURES`: how it is told from a receipt)."""
    why: str
    """Said after "superseded by the check's fix: "."""


FIXES: tuple[CheckFix, ...] = (
    CheckFix(
        _REGRESSION,
        4,
        "repeat-difference",
        "regression-24view 4 judges repeats from one random state in evaluation mode",
    ),
    CheckFix(
        _CONTROL,
        2,
        "random-state-difference",
        "observer-off-control 2 wraps regression-24view 4, which judges repeats from one "
        "random state in evaluation mode",
    ),
)


def fixed_by(
    check: str,
    version: str,
    parameters: Mapping[str, Any],
    outcome: str,
    reason: str | None,
    measurements: Mapping[str, Any],
) -> CheckFix | None:
    """The fix that supersedes a receipt of `check` at `version` with these signed
    fields, or None where its verdict stands."""
    if outcome != "failed":
        return None
    for fix in FIXES:
        if fix.check != check or not _older(version, fix.fixed_in):
            continue
        if _FAILURES[fix.removes](parameters, reason, measurements):
            return fix
    return None


def superseded_text(fix: CheckFix, version: str) -> str:
    """The sentence every surface says of a receipt `fix` supersedes."""
    return (
        f"superseded by the check's fix: {fix.why} (its only failure under version "
        f"{version}, a {fix.removes.replace('-', ' ')}): inconclusive"
    )


def _older(version: str, fixed_in: int) -> bool:
    """`version` is an integer below `fixed_in` (a version the table cannot order
    keeps its verdict)."""
    try:
        return int(version) < fixed_in
    except ValueError:
        return False


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def _repeat_difference(
    parameters: Mapping[str, Any], reason: str | None, m: Mapping[str, Any]
) -> bool:
    """The 24-view check failed only because declared outputs did not repeat between
    its two forwards: each output row it signed is finite, and those over the allowed
    difference (``pooled_atol``) are what failed; no NLL family failed; and its reason
    says exactly one "did not repeat" per such row and nothing else (a missing output
    or a shape difference is said there only). A receipt that signed no output rows
    cannot show it, and keeps its verdict."""
    rows = m.get("outputs")
    atol = _number(parameters.get("pooled_atol", 0.0))
    if not isinstance(rows, list) or not rows or atol is None or not reason:
        return False
    failing: list[str] = []
    for row in rows:
        if not isinstance(row, Mapping) or not isinstance(row.get("name"), str):
            return False
        diff = _number(row.get("max_abs_diff"))
        if diff is None or not math.isfinite(diff) or row.get("nonfinite") != 0:
            return False
        if diff > atol:
            failing.append(row["name"])
    families = m.get("families", [])
    if not isinstance(families, list) or any(
        not isinstance(f, Mapping) or f.get("state") == "failed" for f in families
    ):
        return False
    # The check says its problems in the order of its rows (sorted by name).
    said = reason.split("; ")
    if not failing or len(said) != len(failing):
        return False
    return all(
        part.startswith(f"{name} did not repeat: ")
        for part, name in zip(said, failing, strict=True)
    )


# What one random state per forward moves in the 24-view check's compared
# measurements: the outputs' digests, the pooled hidden states and the NLLs.
_RANDOM_PREFIXES = ("outputs[", "pooled_", "nll_")


def _random_state_difference(
    parameters: Mapping[str, Any], reason: str | None, m: Mapping[str, Any]
) -> bool:
    """The control of the 24-view check (an older one) failed only because the two
    runs' outputs differed as their random states did: both runs ended alike, and
    every difference it signed is an output digest, a pooled figure or an NLL."""
    inner = parameters.get("check")
    inner_version = parameters.get("inner_check_version", "0")
    if inner != _REGRESSION or not isinstance(inner_version, str):
        return False
    if not _older(inner_version, FIXES[0].fixed_in):
        return False
    diffs = m.get("differences")
    if not isinstance(diffs, list) or not diffs or m.get("on_outcome") != m.get("off_outcome"):
        return False
    return all(
        isinstance(d, Mapping)
        and isinstance(d.get("key"), str)
        and d["key"].startswith(_RANDOM_PREFIXES)
        for d in diffs
    )


_FAILURES: Mapping[str, Callable[[Mapping[str, Any], str | None, Mapping[str, Any]], bool]] = {
    "repeat-difference": _repeat_difference,
    "random-state-difference": _random_state_difference,
}
