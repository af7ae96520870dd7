"""Every surface says why a claim blocks: the reason's first clause with its
deciding figure leads the blocker, then the next command, in the terminal, the
Markdown summary, the GitHub check (its annotation) and JUnit (its `message`)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from ledger.read import formats
from ledger.read.render import render_status

from .factories import receipt, revision
from .helpers import report

FIGURE = "peak 9.1 GiB over 8 GiB"
FAILING = f"test tests/test_model.py::test_step failed: {FIGURE}"


def _failed_anywhere() -> dict[str, Any]:
    """A claim at the empty scope (any environment) that a counterexample fails."""
    ok = receipt(seq=1, pr=7)
    bad = receipt(seq=2, pr=7, outcome="failed", reason=FAILING)
    return report([ok, bad], rev=revision(pr=7), scope={}).to_json()


def _before(text: str, first: str, then: str) -> bool:
    return first in text and then in text and text.index(first) < text.index(then)


def test_a_blocker_leads_with_its_reason_then_the_next_command_on_every_surface() -> None:
    doc = _failed_anywhere()
    [b] = doc["verdict"]["blockers"]
    assert b["scope_text"] == "any environment"
    terminal = " ".join(render_status(doc, width=80).split())
    blocking = terminal[terminal.index("Blocking:") : terminal.index("Claims:")]
    assert "failed (scope: any environment)" in blocking
    assert "failed at any environment" not in blocking
    assert _before(blocking, FIGURE, "next: ")

    md = formats.markdown(doc)
    [line] = [x for x in md.splitlines() if x.startswith("1. ")]
    assert "failed (scope: any environment)" in line
    assert _before(line, FIGURE, "next: ")

    [note] = formats.github_check(doc)["output"]["annotations"]
    assert note["message"].splitlines()[0].endswith(f"{FIGURE})")
    assert _before(note["message"], FIGURE, "next: ")

    case = ET.fromstring(formats.junit(doc)).find(".//failure")
    assert case is not None
    assert FIGURE in case.get("message", "")
    assert case.get("message", "").startswith("failed: ")
    assert _before(case.text or "", FIGURE, "next: ")
