"""The namespaces the ranks of one claim share (user, pid, ipc, network), held for the claim.

Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator

from ledger.evidence.errors import UsageError
from ledger.sandbox import SandboxPolicy, render
from ledger.sandbox.proof import below

__all__ = ["shared_namespaces"]


def _inside(pid: int) -> int | None:
    """The first process below ``pid`` in a pid namespace other than this one's: the
    holder's sandbox (below the launcher's, or bubblewrap's own, outer process)."""
    mine = os.readlink("/proc/self/ns/pid")
    for p in below(pid):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{p}/ns/pid") != mine:
                return p
    return None


@contextlib.contextmanager
def shared_namespaces(bwrap: str, base: SandboxPolicy, *, network: bool = False) -> Iterator[int]:
    """User, pid, ipc and network namespaces (loopback only) for the ranks of one claim
    to share: gloo and NCCL rendezvous over loopback, and NCCL's intra-host transports
    need the peer's pid and SysV/POSIX shared memory, which separate namespaces would
    cut. No other claim or run shares them. With ``network`` the ranks keep the
    host's network (the plan gives the claim one).

    Yields the host pid of the process that holds them, for the ranks' policies
    (``joined=True, holder=pid``): each rank's launcher enters them as root of the
    holder's user namespace, which is the unprivileged host uid, never the host's
    root, and bubblewrap mounts a procfs of the joined pid namespace. The holder is a
    sandbox of its own (the allow-list, nothing else,
    the same unprivileged uid) that lives as long as the context: on the way out it
    ends, and with it, as the init of the pid namespace, every process a rank left
    behind. Entering another process's network namespace needs root; `UsageError`
    otherwise."""
    if os.geteuid() != 0:
        raise UsageError(
            "the ranks of a claim share one network namespace, which needs root; "
            "run as root, or give the claim network = true"
        )
    # Made by the launcher with a map onto the unprivileged uid (root there is that
    # uid), so that each rank can enter it as its root: bubblewrap needs that to mount
    # a procfs of the joined pid namespace (`ledger.sandbox.launcher.enter`).
    policy = SandboxPolicy(
        proc=base.proc,
        network=network,
        route="rootmap",
        host_uid=base.host_uid,
        host_gid=base.host_gid,
    )
    holder = subprocess.Popen(
        render(policy, ["/bin/sh", "-c", "read _"], bwrap=bwrap),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        inside = None
        while inside is None and holder.poll() is None and time.monotonic() < deadline:
            # until bubblewrap has started the process inside the namespaces
            inside = _inside(holder.pid)
            if inside is None:
                time.sleep(0.005)
        if inside is None:
            raise UsageError("could not create the namespaces for the claim's ranks")
        yield inside
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        try:
            holder.wait(timeout=30)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()
