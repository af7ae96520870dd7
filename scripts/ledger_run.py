"""The ledger command run as a user runs it, by a given tree's code, with everything of
its own (ledger, keys, caches) under one folder: what the benchmarks that time a whole
`ledger qualify` share (`benchmarks/whole_plan.py`, `benchmarks/cpu_claims.py`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["ledger_cmd", "ledger_env", "ledger_show"]


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


def ledger_show(env: dict[str, str], cwd: Path, rid: str) -> dict[str, Any] | None:
    """The predicate of receipt ``rid`` (``ledger show --json``), or None where it could
    not be shown."""
    shown = subprocess.run(
        [sys.executable, "-m", "ledger", "show", rid, "--json"],
        env=env,
        cwd=cwd,
        capture_output=True,
        check=False,
    )
    if shown.returncode != 0:
        return None
    predicate: dict[str, Any] = json.loads(shown.stdout)["statement"]["predicate"]
    return predicate
