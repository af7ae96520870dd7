"""Input limits, applied where input enters: JSON and TOML documents, and the
values that reach database columns.

Every bound here is checked before any parser recursion or any database
statement, so SQLite and PostgreSQL refuse the same inputs with the same
one-line reason (a database would otherwise truncate, overflow or reject
them each in its own way), and no input reaches Python's recursion limit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ledger.evidence.errors import InputError, RefusedError

__all__ = [
    "COLUMN_LIMITS",
    "MAX_DEPTH",
    "MAX_INT",
    "MIN_INT",
    "check_int",
    "check_media_type",
    "check_nesting",
    "check_row",
    "check_text",
    "load_json",
    "parse_int",
]

MAX_DEPTH = 64
"""Deepest nesting of arrays/objects (JSON) or arrays/tables (TOML) accepted.
A receipt nests about 6 deep; 64 leaves room for any honest document."""

MAX_INT, MIN_INT = 2**63 - 1, -(2**63)
"""The range of a BIGINT on both backends (SQLite's INTEGER is the same 8 bytes)."""

MAX_INT32 = 2**31 - 1
"""The range of the INTEGER columns on PostgreSQL (`source.pr`): SQLite would store more."""
INT32_COLUMNS = frozenset({"pr"})

MAX_INT_DIGITS = 40
"""Longest integer literal accepted in a JSON document; far below Python's
own 4,300-digit limit, whose ValueError would otherwise surface per caller."""

COLUMN_LIMITS: dict[str, int] = {
    # The lengths of the indexed columns in ledger/store/tables.py, by column name.
    "claim": 200,
    "check_name": 200,
    "repo": 500,
    "repo_id": 500,
    "commit": 64,
    "tree": 64,
    "package_digest": 64,
    "outcome": 16,
    "observer": 4,
    "signer": 64,
    "id": 80,
    "receipt_id": 80,
    "verdict": 16,
    "key": 100,
    "value": 500,
    "name": 64,
    "role": 16,
    "keyid": 64,
    "reason": 10_000,
    "media_type": 200,
}


def check_nesting(text: str | bytes, what: str, *, toml: bool = False) -> None:
    """Refuse a document nested deeper than MAX_DEPTH, before it is parsed.

    A linear scan that skips string literals ("..." with escapes; for TOML
    also '...' and # comments), so brackets inside strings do not count.
    """
    s = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    # Each level opens with a bracket: a document holding no more of them than the limit
    # (counted in C, strings and all) cannot be nested past it, and is not scanned.
    if s.count("[") + s.count("{") <= MAX_DEPTH:
        return
    depth = 0
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c == '"' or (toml and c == "'"):
            i += 1
            while i < n and s[i] != c:
                i += 2 if s[i] == "\\" and c == '"' else 1
        elif toml and c == "#":
            while i < n and s[i] != "\n":
                i += 1
        elif c in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise InputError(f"{what} is nested more than {MAX_DEPTH} levels deep")
        elif c in "]}":
            depth -= 1
        i += 1


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise InputError(f"integer of {len(text.lstrip('-'))} digits (limit {MAX_INT_DIGITS})")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise InputError(f"number {text[:20]} is out of range")
    return value


def _reject_constant(name: str) -> Any:
    raise InputError(f"{name} is not JSON")


def load_json(raw: str | bytes, what: str) -> Any:
    """json.loads with the depth and integer bounds; InputError with one line otherwise
    (naming `what`, when given)."""
    check_nesting(raw, what or "JSON document")
    try:
        return json.loads(
            raw, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_reject_constant
        )
    except InputError as e:
        raise InputError(f"{what}: {e}" if what else str(e)) from None
    except (UnicodeDecodeError, ValueError) as e:
        reason = f"malformed JSON: {e}"
        raise InputError(f"{what} is not JSON ({reason})" if what else reason) from None


def check_text(value: str, what: str, limit: int) -> None:
    """A text column value: bounded length, no NUL (PostgreSQL cannot store it)."""
    if "\x00" in value:
        raise RefusedError(f"{what} contains a NUL character")
    if len(value) > limit:
        raise RefusedError(f"{what} is {len(value)} characters, over the {limit}-character limit")


def check_int(value: int, what: str, *, bits: int = 64) -> None:
    top = MAX_INT32 if bits == 32 else MAX_INT
    if not -top - 1 <= value <= top:
        shown = str(value) if len(str(abs(value))) <= 40 else f"of {len(str(abs(value)))} digits"
        raise RefusedError(f"{what} {shown} is outside the {bits}-bit integer range")


_MEDIA_TYPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*$")


def check_media_type(value: str, what: str) -> None:
    """`type/subtype` (parameters too) in printable ASCII, within the column: a CR or
    LF would split the Content-Type header the artifact is served with."""
    check_text(value, what, COLUMN_LIMITS["media_type"])
    base = value.partition(";")[0].rstrip(" ")
    if not _MEDIA_TYPE.match(base) or any(not 0x20 <= ord(c) < 0x7F for c in value):
        raise RefusedError(f"{what} {value[:60]!r} is not a media type (type/subtype)")


def parse_int(text: str) -> int:
    """An integer literal, refused past MAX_INT_DIGITS digits (before Python's own limit)."""
    return _parse_int(text)


def check_row(table: str, row: Mapping[str, Any]) -> None:
    """Every value of one derived row against its column's limit."""
    for col, value in row.items():
        what = f"{table}.{col}"
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int):
            check_int(value, what, bits=32 if col in INT32_COLUMNS else 64)
        elif isinstance(value, str):
            check_text(value, what, COLUMN_LIMITS.get(col, 10_000_000))


def check_rows(table: str, rows: Iterable[Mapping[str, Any]]) -> None:
    for row in rows:
        check_row(table, row)
