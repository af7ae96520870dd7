"""How many processes one sandbox may hold: a pids cgroup of its own.

Every sandbox runs as one host uid, so ``RLIMIT_NPROC`` (counted per uid) cannot
keep one from starving another: it would be a quota they share, the very thing to
avoid. A pids cgroup is counted per sandbox. As root, where this host has a pids
controller Ledger may write, the launcher makes ``ledger-sandbox-<pid>``, sets
``pids.max`` and enters it before anything of the sandbox starts; everything the
sandbox starts is counted there and a fork past the limit fails with ``EAGAIN``:

- cgroup v1's ``pids`` hierarchy: below this process's pids cgroup;
- cgroup v2 (a unified hierarchy whose ``cgroup.controllers`` lists ``pids`` here):
  beside this process's cgroup, a child of the parent that hands it the controller
  (this process's own cgroup holds processes, so none of its children may take a
  controller: the no-internal-process rule); the sandbox's processes wait in a leaf
  of it (`ledger.sandbox.launcher.PIDS_LEAF`), its claims' cgroups beside the leaf.

Elsewhere (no pids controller, one Ledger may not write, not root) there is no such
limit, and every receipt of the sandbox says so.

Standard library only.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

from ledger.evidence.errors import UsageError
from ledger.sandbox.launcher import PIDS_LEAF, PIDS_PREFIX, remove_claims

__all__ = [
    "DEFAULT_MOST",
    "FLOOR",
    "MOST_VAR",
    "controller",
    "folder_of",
    "held",
    "kind",
    "most",
    "release",
    "sandbox_of",
    "unplaced",
]

MOST_VAR = "LEDGER_SANDBOX_PIDS_MAX"
DEFAULT_MOST = 16384
"""Processes and threads one sandbox may hold at once, at most: a training rank's
threads (one intra-op pool a core) and data-loader workers stay well below it on a
host of 128 cores; an eighth of the host's ``pid_max`` where that is less, so that
no one sandbox can take the host's pids (`most`)."""
FLOOR = 1024

_V1 = Path("/sys/fs/cgroup/pids")
_V2 = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))
"""Where a unified hierarchy is mounted: alone, or beside v1's (a hybrid host)."""


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


def _lines(pid: int | str) -> list[tuple[str, str]]:
    """(controllers, path) of each hierarchy ``pid`` is in (``self``: this process)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return []
    return [(c, path) for _, c, path in (line.split(":", 2) for line in lines)]


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _unified(path: str) -> Path | None:
    """The folder of a unified-hierarchy cgroup ``path`` (``0::path``)."""
    for mount in _V2:
        if (mount / "cgroup.controllers").is_file():
            folder = mount / path.lstrip("/")
            if (folder / "cgroup.procs").is_file():
                return folder
    return None


def controller(version: int | None = None) -> str | None:
    """The pids folder the launcher may make a sandbox's own cgroup in: this process's
    cgroup v1 pids folder, else (cgroup v2) the parent whose ``cgroup.subtree_control``
    hands this process's cgroup the pids controller, where this process may write;
    ``version`` asks for one of the two only."""
    lines = _lines("self")
    for controllers, path in lines:
        if version != 2 and "pids" in controllers.split(","):
            folder = _V1 / path.lstrip("/")
            if (folder / "cgroup.procs").is_file() and os.access(folder, os.W_OK):
                return str(folder)
    for controllers, path in lines:
        mine = None if version == 1 or controllers else _unified(path)
        if mine is None or _claims_memory_here(lines, mine):
            continue
        # At the hierarchy's root a child is its own; elsewhere a sibling of this one.
        parent = mine if path.strip("/") == "" else mine.parent
        handed = "pids" in _read(parent / "cgroup.subtree_control").split()
        if handed and os.access(parent, os.W_OK):
            return str(parent)
    return None


def _claims_memory_here(lines: list[tuple[str, str]], mine: Path) -> bool:
    """Whether each claim's memory cgroup (`runners.harness.cgroup`: no v1 memory
    hierarchy, this process's unified cgroup handing down memory) lies in this same
    unified hierarchy: a process is in one cgroup of a hierarchy, so a sandbox's pids
    cgroup there would take the claim's processes out of the one whose peak the
    receipt reads. No limit of this kind then, and the receipt says so."""
    v1_memory = any("memory" in c.split(",") for c, _ in lines)
    return not v1_memory and "memory" in _read(mine / "cgroup.subtree_control").split()


def kind(under: str) -> str:
    """Which hierarchy ``under`` (`controller`'s) is in, as the receipt says it."""
    return "cgroup v2" if (Path(under) / "cgroup.subtree_control").exists() else "cgroup v1"


def folder_of(pid: int) -> Path | None:
    """The pids cgroup process ``pid`` is counted in, as the host sees it: its cgroup v1
    pids folder, else its unified one where that takes the pids controller; None where
    neither is seen here."""
    lines = _lines(pid)
    for controllers, path in lines:
        if "pids" in controllers.split(","):
            return _V1 / path.lstrip("/")
    for controllers, path in lines:
        folder = None if controllers else _unified(path)
        if folder is not None and (folder / "pids.max").is_file():
            return folder
    return None


def sandbox_of(folder: Path | None) -> Path | None:
    """The sandbox's own pids cgroup that ``folder`` is (cgroup v1), or is directly below
    (its v2 leaf, a claim's cgroup); None where it is none of Ledger's."""
    for f in () if folder is None else (folder, folder.parent):
        if f.name.startswith(PIDS_PREFIX) and (f / "pids.max").is_file():
            return f
    return None


def unplaced(folder: Path | None) -> bool:
    """Whether ``folder`` is where a sandbox's own processes are counted (no claim's)."""
    if folder is None:
        return False
    return folder.name.startswith(PIDS_PREFIX) or (
        folder.name == PIDS_LEAF and folder.parent.name.startswith(PIDS_PREFIX)
    )


def held(pid: int) -> int | None:
    """The ``pids.max`` of the sandbox cgroup ``pid`` is in, read from the host; None
    where it is in none of Ledger's."""
    box = sandbox_of(folder_of(pid))
    if box is None:
        return None
    text = _read(box / "pids.max").strip()
    return int(text) if text.isdigit() else None


def release(under: str, pid: int) -> None:
    """Remove the cgroup the launcher ``pid`` made, once its processes are gone (the
    launcher also removes those of launchers that ended, each time it starts)."""
    remove_claims(os.path.join(under, f"{PIDS_PREFIX}{pid}"))
    with contextlib.suppress(OSError):
        os.rmdir(os.path.join(under, f"{PIDS_PREFIX}{pid}"))
