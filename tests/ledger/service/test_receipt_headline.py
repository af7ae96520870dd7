"""An admission receipt page's headline figure is the one that decided: a
counterexample's ratio where there is one, else the worst admitted shape's,
never a refused shape's; and it reads as the key table's
`max_measured_over_predicted` beneath it. On every committed admission receipt."""

from __future__ import annotations

from ledger.service.web.views import _measurements
from tests.ledger.evidence_ledgers import evidence_ledgers


def _admission_receipts() -> list[tuple[str, dict]]:  # type: ignore[type-arg]
    return [
        (led.name, doc)
        for led in evidence_ledgers()
        for doc in led.shown
        if doc["kind"] == "receipt"
        and doc["statement"]["predicate"].get("check", {}).get("name") == "admission"
    ]


def test_the_headline_ratio_is_the_deciding_one_and_equals_its_table() -> None:
    seen = set()
    for name, doc in _admission_receipts():
        m = doc["statement"]["predicate"]["measurements"]
        shown = _measurements("admission", m)
        if shown["ratio"] is None:
            continue
        key = dict(shown["key"])
        assert shown["ratio"]["ratio"] == key["max_measured_over_predicted"]["text"], (
            name,
            doc["id"],
        )
        seen.add(doc["id"][:19])
    # The CPU run whose worst ratio (0.889 at 1x64) is a refused shape's: its
    # headline is the admitted worst, 0.854.
    assert "sha256:5a10f73c6e57" in seen
    # The H200 run with counterexamples: the headline is the counterexample's 1.1.
    assert "sha256:865b6253ca16" in seen


def test_a_counterexample_decides_the_headline() -> None:
    [(_, doc)] = [x for x in _admission_receipts() if x[1]["id"].startswith("sha256:865b6253ca16")]
    ratio = _measurements("admission", doc["statement"]["predicate"]["measurements"])["ratio"]
    assert ratio["shape"] == "4x2048" and ratio["phase"] == "forward_nograd" and ratio["over"]
