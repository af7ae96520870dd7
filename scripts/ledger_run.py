"""The ledger command run as a user runs it, by a given tree's code, with everything of
its own (ledger, keys, caches) under one folder: what the benchmarks that time a whole
`ledger qualify` share (`benchmarks/whole_plan.py`, `benchmarks/cpu_claims.py`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["ledger_cmd", "ledger_env"]


def ledger_env(code: Path, home: Path) -> dict[str, str]:
    """This process's environment without its ``LEDGER_*`` settings, ``code`` first on
    the path, and the ledger, keys, cache and calibration folder under ``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(code), *filter(None, [os.environ.get("PYTHONPATH", "")])]),
        PYTHONUNBUFFERED="1",
        LEDGER_DB=str(home / "ledger.db"),
        LEDGER_KEYS=str(home / "keys"),
        LEDGER_CACHE=str(home / "cache"),
        LEDGER_CALIBRATION_DIR=str(home / "calibration"),
    )
    return env


def ledger_cmd(env: dict[str, str], cwd: Path, *args: str) -> None:
    """``ledger ARGS`` in ``cwd``, which must lie outside any tree: ``-m`` puts the
    working folder first on the path."""
    subprocess.run(
        [sys.executable, "-m", "ledger", *args],
        env=env,
        cwd=cwd,
        check=True,
        stdout=subprocess.DEVNULL,
    )
