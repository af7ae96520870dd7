"""A process found from outside its pid namespace: the one child of a known parent
whose pid in its innermost namespace is known (``NSpid`` in ``/proc/PID/status`` names
a process's pid in each namespace it is in, the innermost last). The fork server's
client and the sandbox's claim placer both find the claim process through this one
function."""

from __future__ import annotations

import os

__all__ = ["child_with_inner_pid"]


def child_with_inner_pid(parent: int, inner: int) -> int | None:
    """The pid, as this process sees it, of the child of ``parent`` whose pid in its
    innermost namespace is ``inner``; None where no such child is seen."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if fields.get("PPid", "").strip() != str(parent):
            continue
        nspids = fields.get("NSpid", "").split()
        if nspids and nspids[-1] == str(inner):
            return int(entry.name)
    return None
