"""What this host offers a sandbox's process limit: its cgroup hierarchies, read only.

Prints one JSON document: this process's cgroups (``/proc/self/cgroup``), the cgroup
mounts, for the unified hierarchy (cgroup v2) the controllers this process's cgroup
has and its parent hands down (``cgroup.controllers``, ``cgroup.subtree_control``)
and whether they can be written here, and the folder `ledger.sandbox.pids.controller`
chooses for each hierarchy (None: no limit of that kind here). It changes nothing.
A host where ``v2.chosen`` is a folder runs the v2 case of
``tests/ledger/sandbox/test_pids_hierarchies.py``.

    python -m scripts.device.cgroup_v2_probe
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from ledger.sandbox import pids

__all__ = ["offered", "probe"]

_MOUNTS = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _unified() -> dict[str, Any]:
    """The unified hierarchy as this process finds it."""
    line = next((x for x in _read(Path("/proc/self/cgroup")).splitlines() if x[:3] == "0::"), "")
    mount = next((m for m in _MOUNTS if (m / "cgroup.controllers").is_file()), None)
    if mount is None or not line:
        return {"mounted": None}
    mine = mount / line[3:].lstrip("/")
    parent = mine if line[3:].strip("/") == "" else mine.parent
    return {
        "mounted": str(mount),
        "cgroup": str(mine),
        "controllers": _read(mine / "cgroup.controllers").split(),
        "parent": str(parent),
        "parent_subtree_control": _read(parent / "cgroup.subtree_control").split(),
        "parent_writable": os.access(parent, os.W_OK),
        "processes_here": len(_read(mine / "cgroup.procs").split()),
    }


def probe() -> dict[str, Any]:
    mounts = [
        line.split()[1:3]
        for line in _read(Path("/proc/mounts")).splitlines()
        if line.split()[2:3] in (["cgroup"], ["cgroup2"])
    ]
    return {
        "euid": os.geteuid(),
        "self": _read(Path("/proc/self/cgroup")).splitlines(),
        "mounts": mounts,
        "v1": {"chosen": pids.controller(1)},
        "v2": {**_unified(), "chosen": pids.controller(2)},
    }


def offered() -> str:
    """One line: what the unified hierarchy offers here (a skipped test's reason)."""
    v2 = _unified()
    if v2["mounted"] is None:
        return "no unified hierarchy mounted"
    return (
        f"cgroup2 at {v2['mounted']}; this process's cgroup has controllers "
        f"{v2['controllers'] or 'none'}, its parent hands down "
        f"{v2['parent_subtree_control'] or 'none'}"
        + ("" if v2["parent_writable"] else " (not writable here)")
    )


if __name__ == "__main__":
    json.dump(probe(), sys.stdout, indent=2)
    sys.stdout.write("\n")
