"""Fuzz counts: every case run is tallied, and the totals are printed in the
terminal summary and written to fuzz-counts.json under the session's tmp dir
(whether or not pytest captures output)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

COUNTS: Counter[str] = Counter()
_WRITTEN: list[Path] = []


@pytest.fixture(scope="session")
def fuzz_counts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Counter[str]]:
    yield COUNTS
    out = tmp_path_factory.getbasetemp() / "fuzz-counts.json"
    out.write_text(json.dumps(dict(COUNTS), indent=2) + "\n")
    _WRITTEN.append(out)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not COUNTS:
        return
    kinds = sorted(k.removesuffix(".cases") for k in COUNTS if k.endswith(".cases"))
    parts = [f"{k} {COUNTS[k + '.cases']}" for k in kinds]
    terminalreporter.write_line(
        f"fuzz: {sum(COUNTS[k + '.cases'] for k in kinds)} cases ({', '.join(parts)}); "
        f"tracebacks {COUNTS['tracebacks']}, 5xx {COUNTS['5xx']}, "
        f"writes after refusal {COUNTS['writes_after_refusal']}"
        + (f"; counts in {_WRITTEN[0]}" if _WRITTEN else "")
    )
