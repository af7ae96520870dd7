"""The CI snippets of the docs, found by one fixed rule: a fenced block whose info string
is ``LANG ci-snippet PROVIDER`` (```` ```yaml ci-snippet buildkite ````) in README.md or
docs/*.md. PROVIDER says how the block runs: ``shell`` (a POSIX sh step), ``kubernetes``,
``skypilot``, ``github-actions``, ``buildkite`` or ``gitlab-ci``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PROVIDERS = ("shell", "kubernetes", "skypilot", "github-actions", "buildkite", "gitlab-ci")
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.M | re.S)
"""Every fenced block: its info string and its text."""
MARK = "ci-snippet"


@dataclass(frozen=True)
class Snippet:
    where: str
    """The file and the line the block starts on."""
    provider: str
    text: str


def ci_snippets() -> list[Snippet]:
    out = []
    for doc in DOCS:
        body = doc.read_text()
        for m in FENCE.finditer(body):
            words = m.group(1).split()
            if MARK not in words:
                continue
            line = body.count("\n", 0, m.start()) + 1
            where = f"{doc.relative_to(ROOT)}:{line}"
            rest = words[words.index(MARK) + 1 :]
            provider = rest[0] if rest else ""
            assert provider in PROVIDERS, f"{where}: `{MARK}` needs one of {PROVIDERS}"
            out.append(Snippet(where, provider, m.group(2)))
    return out


def unmarked_ci_blocks() -> list[str]:
    """Blocks that run a pull request's qualification or post its verdict in CI, yet
    carry no mark: each must be one of the snippets the recipes' test runs. A recipe for
    a Ray cluster (`--executor ray`) is the one exception: no cluster runs here."""
    out = []
    for doc in DOCS:
        body = doc.read_text()
        for m in FENCE.finditer(body):
            info, text = m.group(1).split(), m.group(2)
            if MARK in info or not info or info[0] not in ("yaml", "yml"):
                continue
            if "--executor ray" in text:
                continue
            if re.search(r"ledger (qualify|status) --pr", text) or "check-runs" in text:
                out.append(f"{doc.relative_to(ROOT)}:{body.count(chr(10), 0, m.start()) + 1}")
    return out
