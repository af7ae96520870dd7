"""One formatter for figures: bytes in IEC units to three significant digits,
floats never in repr, and recorded sentences (reasons, blockers) rendered with
both on every surface, from the committed H200 evidence ledgers, while the
signed statement keeps the exact figures."""

from __future__ import annotations

import json
import re

import pytest

from ledger.read import formats
from ledger.read.humanize import figure_spans, figures, iec, number
from ledger.read.render import render_history, render_show, render_status
from tests.ledger.evidence_ledgers import evidence_ledgers

# A float as Python's repr prints it (more than five significant digits), and a
# byte count left as digits.
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?![.\w])")
RAW_COUNT = re.compile(r"(?<![\w.:/-])\d{7,}(?![\w.])")


def float_reprs(text: str) -> list[str]:
    return [d for d in DECIMAL.findall(text) if len(d.replace(".", "").lstrip("0")) > 5]


def unreadable(text: str, ids: frozenset[str] = frozenset()) -> list[str]:
    """Float reprs and digit-only byte counts (a receipt's short id may be all digits)."""
    return float_reprs(text) + [n for n in RAW_COUNT.findall(text) if n not in ids]


def short_ids(doc: dict[str, object]) -> frozenset[str]:
    text = json.dumps(doc)
    return frozenset(m[:12] for m in re.findall(r"sha256:([0-9a-f]{64})", text)) | frozenset(
        m[:12] for m in re.findall(r"\b([0-9a-f]{40})\b", text)
    )


def test_bytes_and_floats_read_to_three_significant_digits() -> None:
    assert [iec(n) for n in (512, 1023, 1024, 7 << 20, 2768373248, 149459365888)] == [
        "512 B",
        "1023 B",
        "1.00 KiB",
        "7.00 MiB",
        "2.58 GiB",
        "139 GiB",
    ]
    assert iec(1024**2 - 1) == "1.00 MiB"  # never "1024 KiB"
    assert [number(x) for x in (16.666666666666668, 1.0000000000000002, 0.000123456, 0.0)] == [
        "16.7",
        "1",
        "0.000123",
        "0",
    ]


def test_a_reason_reads_in_units_and_keeps_its_exact_figures() -> None:
    reason = (
        "counterexample: forward_nograd at shape 4x2048 (first) was admitted (predicted "
        "2516754432 <= usable 2518270720, ballast 145151777469) but measured increment "
        "2768373248 > predicted 2516754432"
    )
    assert figures(reason) == (
        "counterexample: forward_nograd at shape 4x2048 (first) was admitted (predicted "
        "2.34 GiB <= usable 2.35 GiB, ballast 135 GiB) but measured increment 2.58 GiB > "
        "predicted 2.34 GiB"
    )
    exact = {e for _, e in figure_spans(reason) if e}
    assert "2768373248 bytes" in exact
    cleanup = (
        "used: 720175104 bytes after vs 552402944 at baseline, delta 167772160 > tolerance 67108864"
    )
    assert figures(cleanup) == (
        "used: 687 MiB after vs 527 MiB at baseline, delta 160 MiB > tolerance 64.0 MiB"
    )
    assert figures("error 16.666666666666668% rel-L2 0.20741859546811559 (noise 0.0)") == (
        "error 16.7% rel-L2 0.207 (noise 0.0)"
    )
    # Ids, versions, shapes, counts and paths are not figures.
    kept = "GPU-97ff812a-9e5c torch 2.11.0 shape 24x32 rank 1234567 at /tmp/x-12345678/a.py:144"
    assert figures(kept) == kept


@pytest.mark.parametrize("led", evidence_ledgers(), ids=lambda led: led.name)
def test_every_surface_renders_the_evidence_readably(led: object) -> None:
    from tests.ledger.evidence_ledgers import Ledger

    assert isinstance(led, Ledger) and led.statuses
    for doc in led.statuses:
        reasons = [r for c in doc["verdict"]["claims"] for r in c["reasons"]]
        surfaces = {
            "terminal": render_status(doc),
            "markdown": formats.markdown(doc),
            "junit": formats.junit(doc),
            "check": json.dumps(formats.github_check(doc)["output"]["annotations"]),
        }
        for name, text in surfaces.items():
            assert unreadable(text, short_ids(doc)) == [], (led.name, name)
        if any(RAW_COUNT.search(r) for r in reasons):
            assert " GiB" in surfaces["markdown"] or " MiB" in surfaces["markdown"]
    for doc in led.shown:
        if doc["kind"] != "receipt":
            continue
        p = doc["statement"]["predicate"]
        if not p.get("reason"):
            continue
        reason = render_show(doc).split("\nreason ", 1)[1].split("\nrepo ")[0]
        assert unreadable(reason) == [], (led.name, doc["id"])
        item = {
            "kind": "receipt",
            "seq": doc["seq"],
            "id": doc["id"],
            "claim": p["claim"],
            "outcome": p["outcome"],
            "observer": p["observer"],
            "reason": p.get("reason"),
            "source": p["source"],
            "scope": {},
        }
        history = render_history({"repo": "r", "commit": "c" * 40}, [item])
        assert unreadable(history.split("reason: ", 1)[1]) == [], (led.name, doc["id"])
