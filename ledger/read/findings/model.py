"""The findings' model: sentences, a small table of marked rows, whether the deciding
figure is past its bound and who read it; and the cell formatting every kind shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeGuard

from ledger.read.humanize import iec, number

COUNTEREXAMPLE = "✘"
REFUSED = "⊘"
_ROWS = 10
"""Rows of a finding's table: the deciding ones; every row is under the measurements."""


@dataclass(frozen=True, slots=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    marks: tuple[str, ...] = ()
    """Per row: COUNTEREXAMPLE, REFUSED or ""; empty where the kind marks nothing."""
    more: int = 0
    """Rows of the same kind left out (every row is under the receipt's measurements)."""


@dataclass(frozen=True, slots=True)
class Findings:
    sentences: tuple[str, ...]
    table: Table | None = None
    over: bool | None = None
    """Whether the deciding figure is past its bound (None: no bound was read)."""
    by: str = "check"
    """Who read the figures: ``check`` (Ledger's own), ``importer``, ``command``
    (`ledger run`) or ``harness`` (another harness's, attested)."""


def _num(v: Any) -> TypeGuard[int | float]:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _b(v: Any) -> str:
    return iec(v) if _num(v) else "–"


def _r(v: Any) -> str:
    return number(v) if _num(v) else "–"


def _count(v: Any) -> str:
    """A count, exact, its thousands apart (`402,653,184`): not a byte figure."""
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else "–"
