"""The plain-text pieces every rendering for people shares: made inert on the way out
(`ledger.read.inert`), a receipt id shortened, a reason on one line, text wrapped to the
terminal's width, a recorded time in minutes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec

from ledger.read.inert import inert

__all__ = ["REASON_CAP", "inert_rendering", "one_line", "short", "when", "wrap"]

_P = ParamSpec("_P")


def inert_rendering(fn: Callable[_P, str]) -> Callable[_P, str]:
    """A rendering whose text is made inert on the way out."""

    @functools.wraps(fn)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> str:
        return inert(fn(*args, **kwargs))

    return run


def short(receipt_id: str) -> str:
    """A receipt id's first 12 hex digits."""
    return receipt_id.removeprefix("sha256:")[:12]


REASON_CAP = 240
"""Characters of one reason in the terminal; `ledger show ID` prints it whole."""


def one_line(text: str, cap: int = REASON_CAP) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= cap else flat[: cap - 1] + "…"


def wrap(text: str, width: int, indent: str, hang: str = "  ") -> list[str]:
    import textwrap  # here: `ledger verify` renders without it

    return textwrap.wrap(
        text,
        width,
        initial_indent=indent,
        subsequent_indent=indent + hang,
        break_long_words=True,
        break_on_hyphens=False,
    ) or [indent]


def when(iso: Any) -> str:
    """`2026-11-30T04:10:55Z` -> `2026-11-30 04:10` (UTC, as recorded)."""
    return str(iso or "")[:16].replace("T", " ")
