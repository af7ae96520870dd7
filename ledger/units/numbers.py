"""Numbers for people: `iec` (bytes in IEC units: GiB is 1024^3), `number`
(three significant digits, never Python's repr), and `figures` (a recorded
sentence with its byte counts and long floats in those forms; the signed text
stays exact, the surfaces render it)."""

from __future__ import annotations

import re

__all__ = ["figure_spans", "figures", "iec", "is_digest", "number", "short_digest"]


def iec(n: float) -> str:
    """`149459365888` -> `139 GiB`, `2768373248` -> `2.58 GiB` (1 KiB = 1024 bytes;
    three significant digits, whole bytes below 1 KiB)."""
    sign = "-" if n < 0 else ""
    x = abs(float(n))
    if x < 1024:
        return f"{sign}{x:.0f} B"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        x /= 1024
        if round(x, 2) < 1024 or unit == "PiB":
            return f"{sign}{_sig3(x)} {unit}"
    raise AssertionError("unreachable")


def _sig3(x: float) -> str:
    """A non-negative magnitude to three significant digits, fixed-point."""
    if x >= 99.95:
        return f"{x:.0f}"
    if x >= 9.995:
        return f"{x:.1f}"
    return f"{x:.2f}"


def number(v: float) -> str:
    """A ratio, a percentage, any float to three significant digits:
    `16.666666666666668` -> `16.7`, `1.0000000000000002` -> `1`, `0.000123456`
    -> `0.000123`; integers as they are."""
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    x = float(v)
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    if x == 0:
        return "0"
    if abs(x) >= 1000:
        return f"{x:.0f}"
    return f"{x:.3g}"


# Words that say the number beside them counts bytes, in the sentences the
# checks record ("predicted 2516754432 <= usable 2518270720", "delta 167772160 >
# tolerance 67108864", "grew 469762048 bytes").
_BYTE_WORDS = (
    "predicted|usable|ballast|measured|increment|delta|tolerance|baseline|reserved|"
    "allocated|peak|free|total|used|held|budget|headroom|margin|limit|capacity|"
    "memory|grew|bytes|size"
)
_BEFORE = re.compile(rf"(?:\b(?:{_BYTE_WORDS})\b)\s*[:=]?\s*$", re.IGNORECASE)
_COMPARE = re.compile(r"(?:\bvs\.?|\bthan|\bof|<=|>=|<|>|≤|≥|=|\bto)\s*$", re.IGNORECASE)
_AFTER = re.compile(r"^\s*(?:bytes?\b|B\b|-byte\b|at baseline\b)")
# An integer or a float as a token of its own (not inside an id, a version or a hex digest).
_NUMBER = re.compile(r"(?<![\w.:/-])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.]*\w)(?!\.\d)")
_LONG_FLOAT = re.compile(r"\.\d{4,}|[eE][-+]?\d+$")


def figure_spans(text: str) -> list[tuple[str, str | None]]:
    """A recorded sentence as (shown, exact) pieces: byte counts in IEC units and
    long floats to three significant digits, each with its exact text; every
    other piece as recorded (exact None)."""
    out: list[tuple[str, str | None]] = []
    pos = 0
    bytes_before = False  # the previous number of this clause counted bytes
    for m in _NUMBER.finditer(text):
        raw = m.group()
        before = text[pos : m.start()]
        if ";" in before or "\n" in before:
            bytes_before = False
        shown: str | None = None
        is_int = re.fullmatch(r"-?\d+", raw) is not None
        if is_int and abs(int(raw)) >= 1024:
            head = text[max(0, m.start() - 40) : m.start()]
            tail = text[m.end() : m.end() + 12]
            if (
                _BEFORE.search(head)
                or _AFTER.match(tail)
                or (bytes_before and _COMPARE.search(head))
            ):
                shown = iec(int(raw))
                unit = _AFTER.match(tail)
                if unit and unit.group().strip().lower() in ("bytes", "byte", "b", "-byte"):
                    # "469762048 bytes" -> "448 MiB": the unit word is now the figure's.
                    out.append((before, None))
                    out.append((shown, f"{raw} bytes"))
                    pos = m.end() + unit.end()
                    bytes_before = True
                    continue
        elif not is_int and _LONG_FLOAT.search(raw):
            shown = number(float(raw))
        bytes_before = shown is not None and is_int
        out.append((before, None))
        if shown is None:
            out.append((raw, None))
        else:
            out.append((shown, f"{raw} bytes" if is_int else raw))
        pos = m.end()
    out.append((text[pos:], None))
    return [(s, e) for s, e in out if s]


def figures(text: str) -> str:
    """A recorded sentence for people: `predicted 2516754432 <= usable 2518270720`
    -> `predicted 2.34 GiB <= usable 2.35 GiB`, `error 16.666666666666668%` ->
    `error 16.7%` (the signed statement keeps the exact text)."""
    return "".join(s for s, _ in figure_spans(str(text)))


_HEX = frozenset("0123456789abcdef")


def is_digest(v: object) -> bool:
    """A sha256 digest (with or without its `sha256:` prefix), as a figure's text
    shortens it."""
    text = str(v).removeprefix("sha256:")
    return len(text) >= 32 and set(text) <= _HEX


def short_digest(v: object) -> str:
    """A digest's first 12 hex digits and an ellipsis (its prefix kept)."""
    text = str(v)
    prefix = "sha256:" if text.startswith("sha256:") else ""
    return prefix + text.removeprefix("sha256:")[:12] + "…"
