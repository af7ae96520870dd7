"""Helpers for CLI tests: run `main([...])` in-process and capture its output."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ledger.cli import main


@dataclass
class Run:
    code: int
    out: str
    err: str


def run(capsys: pytest.CaptureFixture[str], *args: str) -> Run:
    capsys.readouterr()
    code = main(list(args))
    cap = capsys.readouterr()
    return Run(code, cap.out, cap.err)
