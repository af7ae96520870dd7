"""What a finished claim says on the progress stream: one line, whatever the
number of receipts it recorded."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ledger.units.numbers import figures

__all__ = ["Said", "finished_line"]


class Said(NamedTuple):
    """One receipt a claim recorded, as the line names it."""

    receipt: str
    check: str
    observer: str
    outcome: str
    reason: str | None


def _note(r: Said) -> str:
    if r.outcome == "passed" or not r.reason:
        return ""
    return ": " + " ".join(figures(r.reason).split())


def finished_line(tag: str, claim: str, check: str, recs: Sequence[Said], took: str) -> str:
    """`[2/6] claim passed (9.4 s) -> sha256:…`; a claim with several receipts (an
    observer-off control: the inner check with the observer on, with it off, and
    the comparison that is the claim's verdict) says what each receipt is."""
    if len(recs) == 1:
        [r] = recs
        return f"{tag} {claim} {r.outcome}{_note(r)} ({took}) -> {r.receipt[:19]}"
    verdict = next((r for r in recs if r.check == check), recs[-1])
    parts = []
    for r in recs:
        what = (
            f"the comparison ({r.check}, the claim's verdict)"
            if r is verdict
            else f"{r.check} with the observer {r.observer}"
        )
        parts.append(f"{what} {r.outcome}{_note(r)} -> {r.receipt[:19]}")
    return f"{tag} {claim} {verdict.outcome} ({took}), {len(recs)} receipts: " + "; ".join(parts)
