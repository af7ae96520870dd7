"""How many processes one forked claim may hold beside the others of its sandbox: a
pids cgroup of its own below the sandbox's (`ledger.sandbox.pids`).

Claims forked from the fork server share its sandbox, and so its one pids cgroup:
without more, one claim that forks until refused takes every process the claims
beside it (on devices of their own, or sharing one) had left. Where the sandbox has a
pids cgroup, the host side makes a child of it per claim, ``pids.max`` an equal share
of the sandbox's for each claim that may run at once, and the fork client (as root,
outside the sandbox) moves the claim's process into it before the claim is told to go
(`runners.fork.forkclient`): everything the claim starts is counted there, and the
sandbox's own limit still bounds all of them together. Where the sandbox has none
(no cgroup v1 pids controller, not root) there is no limit per claim either, and the
receipt says so.

Standard library only.
"""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import dataclass
from pathlib import Path

from ledger.sandbox.launcher import CLAIM_PIDS_PREFIX, PIDS_PREFIX

__all__ = ["NO_CLAIM_LIMIT", "ClaimPids", "sandbox_folder"]

NO_CLAIM_LIMIT = "none per claim (the sandbox has no pids cgroup of its own to divide)"
"""The receipt's ``sandbox_claim_pids`` where a forked claim has no limit of its own."""

_V1 = Path("/sys/fs/cgroup/pids")


def sandbox_folder(pid: int) -> Path | None:
    """The pids cgroup of the sandbox that process ``pid`` is in (one of Ledger's), as
    the host sees it; None where it is in none."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            folder = _V1 / path.lstrip("/")
            if folder.name.startswith(PIDS_PREFIX) and (folder / "pids.max").is_file():
                return folder
    return None


@dataclass(frozen=True, slots=True)
class ClaimPids:
    """One claim's pids cgroup below its sandbox's: made empty, entered by the claim's
    process before it starts, removed once the claim ended."""

    path: Path
    most: int
    sandbox_most: int
    share: int

    @classmethod
    def make(cls, server_pid: int, share: int) -> ClaimPids | None:
        """A child of the pids cgroup the fork server ``server_pid`` is in, with a
        ``1/share`` part of its ``pids.max``; None where the server is in no sandbox
        pids cgroup of Ledger's, or none can be made below it."""
        box = sandbox_folder(server_pid)
        if box is None:
            return None
        try:
            text = (box / "pids.max").read_text().strip()
        except OSError:
            return None
        if not text.isdigit():
            return None  # "max": the sandbox itself has no limit to divide
        total, share = int(text), max(1, share)
        most = max(1, total // share)
        path = box / f"{CLAIM_PIDS_PREFIX}{secrets.token_hex(4)}"
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(most))
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()
            return None
        return cls(path, most, total, share)

    def fact(self) -> str:
        """The receipt's ``sandbox_claim_pids``."""
        return (
            f"pids.max {self.most} per claim (a child of the sandbox's pids cgroup,"
            f" whose {self.sandbox_most} bound the claims together; {self.share} at once)"
        )

    def close(self) -> None:
        """Remove it; one that still holds a process (not reaped yet) is removed with
        its sandbox's (`ledger.sandbox.launcher.remove_claims`)."""
        with contextlib.suppress(OSError):
            self.path.rmdir()
