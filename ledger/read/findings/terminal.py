"""The findings' table as aligned terminal rows (`ledger show`), within 80 columns."""

from __future__ import annotations

from ledger.read.findings.model import Findings

_TERMINAL = {
    "predicted_bytes": "predicted",
    "measured_bytes": "measured",
    "measured_over_predicted": "measured/predicted",
}
"""Shorter column names where 80 columns are all there is (the page names the keys)."""
_CELL = 36
"""A terminal cell's most characters."""


def table_lines(f: Findings, width: int = 80) -> list[str]:
    """The findings' table as aligned text rows, the mark in the indent; columns
    past ``width`` are named beneath instead (the first always shows)."""
    t = f.table
    if t is None or not t.rows:
        return []
    cols = [_TERMINAL.get(c, c) for c in t.columns]
    # A long name (a tensor's) keeps its end, where the names differ.
    rows = [tuple(c if len(c) <= _CELL else "…" + c[1 - _CELL :] for c in r) for r in t.rows]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    shown, used = 0, 4
    while shown < len(cols) and used + widths[shown] + 2 <= width + 2:
        used += widths[shown] + 2
        shown += 1
    shown = max(shown, 1)
    fmt = "  ".join(f"{{:<{w}}}" for w in widths[:shown])
    out = ["    " + fmt.format(*cols[:shown]).rstrip()]
    for i, r in enumerate(rows):
        mark = t.marks[i] if i < len(t.marks) else ""
        out.append(f"  {mark or ' '} " + fmt.format(*r[:shown]).rstrip())
    if shown < len(cols):
        out.append(f"    also: {', '.join(cols[shown:])} (ledger show --json)")
    return out
