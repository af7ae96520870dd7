"""Text from signed statements, made inert for where it is shown.

Reasons, notes, claim and key names come from whoever signed them: on a
terminal a C0/C1 control (ESC, CSI, OSC) would clear a reviewer's screen or
write their clipboard; in a Markdown table a `\\r`, `\\n` or `|` adds rows or
cells and `[x](url)` / `![x](url)` becomes a link or a fetched image; in JUnit
XML a control character makes the whole file unparsable. Each function keeps
every printable character and shows each neutralised one visibly, so nothing
is silently hidden from the reader.
"""

from __future__ import annotations

import functools
import re

__all__ = ["inert", "markdown_cell", "xml_text"]

# C0 (except tab and newline, kept where a line layout wants them), DEL, C1;
# plus the Unicode line/paragraph separators and bidi overrides that reorder
# what a terminal shows (a "Trojan Source" reason reads differently than it is).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_CONTROL_NL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_SURROGATE = re.compile("[\ud800-\udfff]")


@functools.cache
def _xml_illegal() -> re.Pattern[str]:
    # Compiled on first use: this class of ranges takes milliseconds to compile,
    # and a terminal rendering (`ledger verify`) never needs it.
    # XML 1.0 Char: #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF].
    return re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


# What makes a cell more than text: a cell break, code spans, links and images
# (`[`, `]`, `!`), raw HTML and autolinks (`<`, `>`); and the backslash itself.
_MD_SPECIAL = re.compile(r"([\\|`\[\]<>!])")


def _escape(m: re.Match[str]) -> str:
    c = m.group(0)
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def inert(text: str, *, newlines: bool = True) -> str:
    """`text` with every control character shown as `\\xNN` (`\\uNNNN`), never sent.

    Tabs are kept; newlines too unless `newlines` is False (one-line fields).
    Lone surrogates, which no terminal encoding can write, are escaped the same way.
    """
    pattern = _CONTROL if newlines else _CONTROL_NL
    return _SURROGATE.sub(_escape, pattern.sub(_escape, text))


def markdown_cell(text: str) -> str:
    """`text` as one Markdown table cell: one line, no cell break, no link or image."""
    flat = inert(text, newlines=False).replace("\t", " ")
    # A bare URL is linked by GitHub's autolink extension; an escaped slash is not a URL.
    return _MD_SPECIAL.sub(r"\\\1", flat).replace("://", ":\\/\\/")


def xml_text(text: str) -> str:
    """`text` without the characters XML 1.0 cannot carry (escaped visibly instead).

    Markup escaping (`&`, `<`) is the XML writer's; this makes the result writable at all.
    """
    return _xml_illegal().sub(_escape, text)
