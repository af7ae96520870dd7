"""A memory cgroup per claim: the outside view of every process the claim starts.

Sampling one pid's resident set misses a helper that a claim forks, fills and
lets exit between two samples. The kernel's cgroup keeps the peak of every
process placed in it and of everything they start: v2 ``memory.peak``, v1
``memory.max_usage_in_bytes``. The claim's processes are placed in it before
any of their code runs (a spawned rank by its launcher, a forked worker by its
client before the worker's word to start). Where no cgroup can be made (no
write access, no memory controller), `ClaimCgroup.make` returns None and the
receipt says the outside view was sampled.

Standard library only; the parent's side (no torch).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ClaimCgroup"]

_ROOT = Path("/sys/fs/cgroup")


def _mine() -> tuple[int, Path] | None:
    """(version, folder) of this process's memory cgroup, where one is writable."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            for mount in (_ROOT / "memory", _ROOT):
                folder = mount / path.lstrip("/")
                if (folder / "memory.max_usage_in_bytes").exists():
                    return 1, folder
    for line in lines:
        if line.startswith("0::"):
            for mount in (_ROOT, _ROOT / "unified"):
                folder = mount / line[3:].lstrip("/")
                if "memory" in _read(folder / "cgroup.subtree_control").split():
                    return 2, folder
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


EXITING_S = 2.0
"""How long `ClaimCgroup.close` lets processes that are already ending leave."""
_PF_EXITING = 0x4


def _ending(pid: int) -> bool:
    """The kernel is ending the process: it is in its exit (``PF_EXITING``), or a SIGKILL
    is pending (a pid namespace torn down with its init); gone counts too."""
    stat = _read(Path(f"/proc/{pid}/stat")).rpartition(")")[2].split()
    if len(stat) < 7:
        return True
    if stat[0] in ("Z", "X") or int(stat[6]) & _PF_EXITING:
        return True
    fields = dict(x.partition(":")[::2] for x in _read(Path(f"/proc/{pid}/status")).splitlines())
    kill = 1 << (signal.SIGKILL - 1)
    return any(int(fields.get(k, "0").strip() or "0", 16) & kill for k in ("SigPnd", "ShdPnd"))


def _int(text: str | None) -> int:
    return int(text) if text is not None and text.strip().isdigit() else 0


@dataclass(frozen=True)
class ClaimCgroup:
    """One claim's cgroup: created empty, its processes placed in it, read, removed."""

    version: int
    path: Path

    @classmethod
    def make(cls, name: str = "claim") -> ClaimCgroup | None:
        found = _mine()
        if found is None:
            return None
        version, parent = found
        path = parent / f"ledger-{name}-{secrets.token_hex(4)}"
        try:
            path.mkdir()
        except OSError:
            return None
        return cls(version, path)

    def join(self) -> None:
        """Place the calling process here (a launcher's ``preexec_fn``, before exec)."""
        with open(self.path / "cgroup.procs", "w") as f:
            f.write("0")

    def procs(self) -> list[int]:
        return [int(x) for x in _read(self.path / "cgroup.procs").split() if x.isdigit()]

    def peak_bytes(self) -> int | None:
        """The highest memory charged to the claim's processes together, less the page
        cache charged by the end (files read are not the claim's memory); None when
        the kernel does not say."""
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        text = _read(self.path / name).strip()
        if not text.isdigit():
            return None
        stat = dict(
            (k, v)
            for k, _, v in (
                line.partition(" ") for line in _read(self.path / "memory.stat").splitlines()
            )
        )
        # Page cache is not the claim's memory, but tmpfs and shared memory counted
        # with it are (a claim could park bytes in /tmp or /dev/shm).
        cache = _int(stat.get("file" if self.version == 2 else "cache"))
        shmem = _int(stat.get("shmem"))
        return max(0, int(text) - max(0, cache - shmem))

    def close(self) -> list[int]:
        """Kill what is still in it (returned) and remove it; what the kernel is
        already ending is first given `EXITING_S` to leave."""
        left = self.procs()
        # What the kernel is already ending (a sandbox's processes killed as its pid
        # namespace ends) leaves on its own; on a loaded host that can take a moment.
        deadline = time.monotonic() + EXITING_S
        while left and all(_ending(p) for p in left) and time.monotonic() < deadline:
            time.sleep(0.01)
            left = self.procs()
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            # A killed process leaves the cgroup once reaped by its parent.
            self.path.rmdir()
        return left

    @property
    def basis(self) -> str:
        what = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        return f"cgroup v{self.version} {what} of every process of the claim, less page cache"
