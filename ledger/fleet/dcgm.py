"""DCGM's diagnostic, where `dcgmi` is installed: once per device per run, before the
claims, so its minutes are timed apart from theirs. Never assumed: a host without
`dcgmi` records that it has none."""

from __future__ import annotations

import shutil
import subprocess
import time
from typing import Any

__all__ = ["diagnose"]

_KEEP = 64 * 1024
"""Bytes of dcgmi's output kept in the health artifact."""


def diagnose(index: str, level: int = 1, timeout_s: int = 1800) -> dict[str, Any]:
    """``dcgmi diag -r LEVEL -i INDEX``: its result (``pass``, ``fail``, or why there
    is none), exit status, wall time and output."""
    exe = shutil.which("dcgmi")
    if exe is None:
        return {"result": "not installed", "level": level}
    argv = [exe, "diag", "-r", str(level), "-i", index]
    t0 = time.monotonic_ns()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"result": f"timed out after {timeout_s} s", "level": level}
    except OSError as e:
        return {"result": f"could not start: {e}", "level": level}
    took = time.monotonic_ns() - t0
    out = done.stdout + done.stderr
    # dcgmi exits non-zero when a test fails, and prints Fail in that test's row.
    failed = done.returncode != 0 or any(
        "fail" in cell.strip().lower() for line in out.splitlines() for cell in line.split("|")[2:]
    )
    return {
        "result": "fail" if failed else "pass",
        "level": level,
        "exit": done.returncode,
        "wall_ns": took,
        "output": out[-_KEEP:],
    }
