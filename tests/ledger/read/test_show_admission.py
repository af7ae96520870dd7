"""`ledger show` of an admission receipt marks its counterexample (✘) and refused (⊘)
shapes, each with its ratio, where the table alone hid them among the admitted ones (the
ratio and the counterexample column fell past 80 columns)."""

from __future__ import annotations

from typing import Any

from ledger.read.render import render_show
from tests.ledger.evidence_ledgers import evidence_ledgers


def _receipt(ledger: str, prefix: str) -> dict[str, Any]:
    [led] = [x for x in evidence_ledgers() if x.name == ledger]
    [doc] = [d for d in led.shown if d["id"].startswith(prefix)]
    return doc


def _shapes(text: str) -> list[str]:
    """The shapes table and what follows it, up to the next measurement or artifact,
    each wrapped line (indented 6) joined to the one it continues."""
    tail = text.split("  shapes (", 1)[1].splitlines()
    out: list[str] = []
    for line in tail[1:]:
        if not line.startswith(("    ", "  ✘ ", "  ⊘ ")):
            break
        if line.startswith("      ") and out and "also:" not in out[-1]:
            out[-1] += " " + line.strip()
        else:
            out.append(line)
    return out


def test_counterexample_shapes_are_marked_with_their_ratio() -> None:
    # H200: 4x2048 forward_nograd admitted at 2.34 GiB predicted, measured 2.58 GiB.
    text = render_show(_receipt("h200-issue11-qwen3", "sha256:865b6253ca16"))
    assert "  shapes (16 rows: 2 counterexamples)" in text
    lines = _shapes(text)
    marked = [x for x in lines if x.startswith("  ✘ ")]
    assert len(marked) == 2 and all("4x2048  forward_nograd" in x for x in marked)
    said = [x.strip() for x in lines if "counterexample:" in x]
    assert len(said) == 2
    assert said[0].startswith("✘ counterexample: 4x2048 forward_nograd")
    assert "measured 2.58 GiB / predicted 2.34 GiB = 1.1" in said[0]
    # Rows that were admitted and fit are not marked.
    assert sum(x.startswith("    1x512") for x in lines) == 4


def test_refused_shapes_are_marked_with_their_ratios() -> None:
    # A CPU run that measured the shapes it refused: two would have fit (over-refused).
    text = render_show(_receipt("cpu-trend", "sha256:5ae4f78dc102"))
    assert "  shapes (19 rows: 5 refused)" in text
    lines = _shapes(text)
    assert sum(x.startswith("  ⊘ ") for x in lines) == 5
    said = [x.strip() for x in lines if x.strip().startswith("⊘ refused:")]
    assert len(said) == 5
    first = said[0]
    assert first.startswith("⊘ refused: 2x64 forward_nograd: predicted ")
    assert "/ usable" in first and "measured/predicted 0.875" in first
    assert "it fit: an over-refusal" in first
    assert sum("over-refusal" in x for x in said) == 2


def test_a_receipt_with_neither_marks_nothing() -> None:
    text = render_show(_receipt("h200-thirdparty-adapter-refused", "sha256:71c161dc19c5"))
    assert "  shapes (" in text and "counterexample:" not in text and "refused:" not in text
    for line in text.splitlines():
        assert not line.startswith("  ✘ ") and not line.startswith("  ⊘ ")


def _found(text: str) -> list[str]:
    """What the check found: from `found` up to the repository line."""
    return text.split("\nfound      ", 1)[1].split("\nrepo ", 1)[0].splitlines()


def test_the_findings_lead_with_the_worst_ratio_and_mark_the_shapes() -> None:
    # The same sentences and rows as the receipt page (ledger/read/findings.py).
    text = render_show(_receipt("h200-issue11-qwen3", "sha256:865b6253ca16"))
    found = _found(text)
    lead = " ".join(" ".join(found[:4]).split())
    assert lead.startswith(
        "Worst measured/predicted 1.1x > bound 1x at shape 4x2048 (forward_nograd): measured "
        "2.58 GiB "
        "against predicted 2.34 GiB"
    )
    rows = [x for x in found if x.startswith("  ✘ ")]
    assert len(rows) == 2 and all("2.34 GiB   2.58 GiB  1.1" in x for x in rows)
    text = render_show(_receipt("cpu-trend", "sha256:5a10f73c6e57"))
    found = _found(text)
    refused = [x for x in found if x.startswith("  ⊘ ")]
    assert len(refused) == 5 and all(x.split()[-2] in ("0.838", "0.875", "0.889") for x in refused)
    # The worst admitted shape leads the table, unmarked.
    header = next(i for i, x in enumerate(found) if x.startswith("    shape"))
    assert found[header + 1].startswith("    2x16") and "0.854" in found[header + 1]
