"""What a sandbox may write, and whose a shortage of disk is.

Every sandbox's writable space is capped (`cap`, ``$LEDGER_SANDBOX_DISK_CAP``): its
private /tmp is a tmpfs the kernel holds to the cap (bubblewrap's ``--size``, where the
installed bubblewrap has it: `tmpfs_size`), and the host folders it may write (a run's
folder: its claims' folders, artifacts and scratch) are held to it by measurement, read
by the parent before each claim (`written`). A reading of the host's disk decides an
``infra-error`` only where the pull request cannot have steered it: the host had less
free than the cap still allowed the run's sandboxes (`shortage`). A shortage the run's
own writes made, within its cap or past it, is the pull request's, with the figures.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ledger.evidence.errors import UsageError

__all__ = [
    "CAP_VAR",
    "DEFAULT_CAP",
    "MIN_FREE",
    "Shortage",
    "cap",
    "shortage",
    "tmpfs_size",
    "written",
]

CAP_VAR = "LEDGER_SANDBOX_DISK_CAP"
DEFAULT_CAP = 32 * 1024**3
"""What one run's sandboxes may write (bytes): a host that runs pull requests gives each
run at least this much free disk, and 64 MiB beside it."""
MIN_FREE = 64 * 1024 * 1024
"""Less free than this where a claim's folder lies, before it starts: short of disk."""


def cap(environ: Mapping[str, str] | None = None) -> int:
    """The cap in bytes: ``$LEDGER_SANDBOX_DISK_CAP`` (a whole number of bytes), else
    `DEFAULT_CAP`; `UsageError` for anything else."""
    raw = (os.environ if environ is None else environ).get(CAP_VAR, "").strip()
    if not raw:
        return DEFAULT_CAP
    if not raw.isdigit() or int(raw) <= 0:
        raise UsageError(f"{CAP_VAR} must be a whole number of bytes above 0, got {raw!r}")
    return int(raw)


def written(folder: Path, stop: int | None = None) -> int:
    """Bytes the files beneath ``folder`` hold on its file system (allocated blocks,
    so a sparse file counts what it takes), links not followed, other file systems not
    entered; the count stops once past ``stop``. 0 where the folder is gone."""
    try:
        dev = folder.lstat().st_dev
    except OSError:
        return 0
    total = 0
    todo = [folder]
    while todo:
        try:
            entries = list(os.scandir(todo.pop()))
        except OSError:
            continue  # gone, or not the parent's to read: what it holds is not counted
        for e in entries:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_dev != dev:
                continue
            total += st.st_blocks * 512
            if e.is_dir(follow_symlinks=False):
                todo.append(Path(e.path))
        if stop is not None and total > stop:
            break
    return total


@dataclass(frozen=True, slots=True)
class Shortage:
    """Too little disk before a claim starts, and whose that is."""

    whose: Literal["host", "code"]
    reason: str


def shortage(free: int, wrote: int, limit: int, where: Path) -> Shortage | None:
    """Whose a shortage of disk is, where ``free`` bytes are free at ``where`` and the
    run's sandboxes wrote ``wrote`` of their cap ``limit``: None where there is none.

    The host's (an ``infra-error``) only where it had less free than the cap still
    allowed the run: the pull request could not have made it so. Else the run's own
    writes used the disk up: the pull request's, never the infrastructure's."""
    if free >= MIN_FREE:
        return None
    allowed = max(0, limit - wrote)
    # Exact bytes, as everything signed says them (the surfaces render IEC units).
    figures = (
        f"{free} bytes free where the claim's folder lies ({where}); the run's sandboxes "
        f"wrote {wrote} bytes there of their cap of {limit} bytes"
    )
    if free < allowed:
        return Shortage(
            "host",
            f"the host is out of disk: {figures}, so it had less than the cap still allowed; "
            "observed before the claim started",
        )
    over = "past its cap" if wrote > limit else "within its cap"
    return Shortage(
        "code",
        f"the pull request's code used the disk up ({over}): {figures}; observed before "
        "the claim started, nothing of it ran",
    )


@functools.cache
def tmpfs_size(bwrap: str) -> bool:
    """Whether this bubblewrap caps a tmpfs (``--size``, bubblewrap 0.8 and later)."""
    try:
        out = subprocess.run(
            [bwrap, "--help"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return "--size" in (out.stdout + out.stderr)
