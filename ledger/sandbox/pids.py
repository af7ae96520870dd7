"""How many processes one sandbox may hold: a pids cgroup of its own.

Every sandbox runs as one host uid, so ``RLIMIT_NPROC`` (counted per uid) cannot
keep one from starving another: it would be a quota they share, the very thing to
avoid. A pids cgroup is counted per sandbox. As root, where this host has a pids
controller Ledger may write (cgroup v1's ``pids`` hierarchy), the launcher makes
``ledger-sandbox-<pid>`` below this process's pids cgroup, sets ``pids.max`` and
enters it before anything of the sandbox starts; everything the sandbox starts is
counted there and a fork past the limit fails with ``EAGAIN``. Elsewhere (no pids
controller, a unified hierarchy whose cgroup Ledger may not split, not root) there
is no such limit, and every receipt of the sandbox says so.

Standard library only.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

from ledger.evidence.errors import UsageError
from ledger.sandbox.launcher import PIDS_PREFIX, remove_claims

__all__ = ["DEFAULT_MOST", "FLOOR", "MOST_VAR", "controller", "held", "most", "release"]

MOST_VAR = "LEDGER_SANDBOX_PIDS_MAX"
DEFAULT_MOST = 16384
"""Processes and threads one sandbox may hold at once, at most: a training rank's
threads (one intra-op pool a core) and data-loader workers stay well below it on a
host of 128 cores; an eighth of the host's ``pid_max`` where that is less, so that
no one sandbox can take the host's pids (`most`)."""
FLOOR = 1024

_V1 = Path("/sys/fs/cgroup/pids")


def most(environ: Mapping[str, str] | None = None) -> int:
    """``$LEDGER_SANDBOX_PIDS_MAX`` (a whole number above 0), else `DEFAULT_MOST` or an
    eighth of this host's ``pid_max`` where that is less (never under `FLOOR`);
    `UsageError` for anything else."""
    raw = (os.environ if environ is None else environ).get(MOST_VAR, "").strip()
    if not raw:
        try:
            pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
        except (OSError, ValueError):
            return DEFAULT_MOST
        return max(FLOOR, min(DEFAULT_MOST, pid_max // 8))
    if not raw.isdigit() or int(raw) <= 0:
        raise UsageError(f"{MOST_VAR} must be a whole number above 0, got {raw!r}")
    return int(raw)


def controller() -> str | None:
    """This process's cgroup v1 pids folder, where it may make one below it."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            folder = _V1 / path.lstrip("/")
            if (folder / "cgroup.procs").is_file() and os.access(folder, os.W_OK):
                return str(folder)
    return None


def held(pid: int) -> int | None:
    """The ``pids.max`` of the sandbox cgroup ``pid`` is in, read from the host; None
    where it is in none of Ledger's."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(",") and path.rsplit("/", 1)[-1].startswith(PIDS_PREFIX):
            try:
                text = (_V1 / path.lstrip("/") / "pids.max").read_text().strip()
            except OSError:
                return None
            return int(text) if text.isdigit() else None
    return None


def release(under: str, pid: int) -> None:
    """Remove the cgroup the launcher ``pid`` made, once its processes are gone (the
    launcher also removes those of launchers that ended, each time it starts)."""
    remove_claims(os.path.join(under, f"{PIDS_PREFIX}{pid}"))
    with contextlib.suppress(OSError):
        os.rmdir(os.path.join(under, f"{PIDS_PREFIX}{pid}"))
