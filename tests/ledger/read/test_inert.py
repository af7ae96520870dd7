"""Output is inert: no control character reaches a terminal, a Markdown cell stays
one cell with no link or image, JUnit XML always parses. Property tests over
arbitrary strings, and the attacks seen: a screen clear, an OSC 52 clipboard
write, a `\\r` that adds a row to the CI summary."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.read.formats import junit, markdown
from ledger.read.inert import inert, markdown_cell, xml_text
from ledger.read.render import render_history

CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
ATTACKS = [
    "\x1b[2J\x1b[H",  # clear the screen
    "\x1b]52;c;cm0gLXJmIH4=\x07",  # OSC 52: write the clipboard
    "ok\rreal row | x |\n| forged | row |",
    "[click](https://evil.example) ![img](https://evil.example/p.png) <https://evil.example>",
    "\x00\x0c\ufffe\ud800",
]
text = st.one_of(st.text(), st.sampled_from(ATTACKS))


def _status_doc(reason: str, claim: str = "c") -> dict[str, Any]:
    row = {
        "claim": claim,
        "required": True,
        "state": "failed",
        "scope": {"k": reason},
        "scope_text": f"k={reason}",
        "via": None,
        "reasons": [reason, reason],
        "next": f"`ledger qualify --claim {claim}` after {reason}",
        "receipts": [],
    }
    verdict = {
        "qualified": False,
        "headline": "not qualified: 0 of 1 required claims qualified",
        "required": 1,
        "qualified_required": 0,
        "scopes": [row["scope_text"]],
        "blockers": [{k: row[k] for k in ("claim", "state", "scope_text", "reasons", "next")}],
        "claims": [row],
    }
    return {
        "verdict": verdict,
        "subject": {"repo": "r", "commit": "a" * 40, "pr": None},
        "qualified": False,
        "judged": [reason],
        "claims": [
            {
                "claim": claim,
                "required": True,
                "scope_role": "required",
                "scope": {"k": reason},
                "state": "failed",
                "receipts": [],
                "reasons": [reason, reason],
            }
        ],
    }


@settings(max_examples=300)
@given(text)
def test_no_control_character_survives_inert(s: str) -> None:
    out = inert(s)
    assert not CONTROL.search(out)
    assert not re.search("[\ud800-\udfff]", out)
    out.encode("utf-8")  # writable to any UTF-8 terminal
    one_line = inert(s, newlines=False)
    assert "\n" not in one_line and not CONTROL.search(one_line)


@settings(max_examples=300)
@given(text)
def test_printable_text_is_kept_as_is(s: str) -> None:
    plain = "".join(c for c in s if c.isprintable() and not CONTROL.match(c))
    plain = "".join(c for c in plain if not 0xD800 <= ord(c) <= 0xDFFF)
    assert inert(plain) == plain


@settings(max_examples=300)
@given(text)
def test_a_markdown_cell_stays_one_cell_without_links(s: str) -> None:
    cell = markdown_cell(s)
    assert "\n" not in cell and "\r" not in cell
    # Every pipe, bracket and angle bracket is escaped by a backslash.
    assert not re.search(r"(?<!\\)(?:\\\\)*[|\[\]<>]", cell)
    assert "://" not in cell
    table = markdown(_status_doc(s, claim=s or "c"))
    rows = [line for line in table.splitlines() if line.startswith("|")]
    assert len(rows) == 3  # header, rule, the one claim row
    assert all(len(re.findall(r"(?<!\\)(?:\\\\)*\|", row)) == 6 for row in rows), table


@settings(max_examples=300)
@given(text)
def test_junit_always_parses(s: str) -> None:
    assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]", xml_text(s))
    ET.fromstring(junit(_status_doc(s, claim=s or "c")).encode())


@settings(max_examples=100)
@given(text)
def test_history_on_a_terminal_carries_no_control(s: str) -> None:
    item = {
        "seq": 1,
        "id": "sha256:" + "a" * 64,
        "kind": "review",
        "receipt": "sha256:" + "b" * 64,
        "verdict": "concur",
        "note": s,
    }
    out = render_history({"repo": s, "commit": "a" * 40, "pr": None}, [item])
    assert not CONTROL.search(out)


def test_show_on_a_terminal_neutralises_a_signed_reason(
    tmp_path: Path, key_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ledger.evidence.keys import KeyDir
    from tests.ledger.factories import envelope
    from tests.ledger.helpers import run

    db = ("--db", f"sqlite:///{tmp_path / 'l.db'}")
    assert run(capsys, "init", *db).code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner", *db).code == 0
    f = tmp_path / "e.json"
    f.write_bytes(envelope(KeyDir(key_dir).load("runner"), outcome="failed", reason=ATTACKS[1]))
    rid = run(capsys, "record", str(f), *db).out.split()[0]
    shown = run(capsys, "show", rid, *db)
    assert shown.code == 0 and "\x1b" not in shown.out and "\x07" not in shown.out
    assert "\\x1b]52;c;" in shown.out  # shown, visibly, not acted on
