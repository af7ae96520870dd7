"""The namespaces the ranks of one claim share (pid, ipc, network), held for the claim.

Standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ledger.evidence.errors import UsageError
from ledger.sandbox import SandboxPolicy, render

__all__ = ["shared_namespaces"]

_CLONE_NEWNET = 0x40000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWPID = 0x20000000


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int((entry / "stat").read_text().rpartition(")")[2].split()[1]) == pid:
                out.append(int(entry.name))
    return out


@contextlib.contextmanager
def shared_namespaces(
    bwrap: str, base: SandboxPolicy, *, network: bool = False
) -> Iterator[Callable[[], None]]:
    """Pid, ipc and network namespaces (loopback only) for the ranks of one claim to
    share: gloo and NCCL rendezvous over loopback, and NCCL's intra-host transports
    need the peer's pid and SysV/POSIX shared memory, which separate namespaces would
    cut. No other claim or run shares them. With ``network`` the ranks keep the
    host's network (the plan gives the claim one).

    Yields a function for `subprocess.Popen`'s ``preexec_fn`` that moves the new
    process into them (its sandbox renders with ``joined=True``). The namespaces are
    held by a process in a sandbox of its own (the allow-list, nothing else) that
    lives as long as the context: on the way out it ends, and with it, as the init
    of the pid namespace, every process a rank left behind. Entering namespaces
    needs root (CAP_SYS_ADMIN); `UsageError` otherwise."""
    if os.geteuid() != 0:
        raise UsageError(
            "the ranks of a claim share one network namespace, which needs root; "
            "run as root, or give the claim network = true"
        )
    policy = SandboxPolicy(proc=base.proc, user=False, network=network)
    holder = subprocess.Popen(
        render(policy, ["/bin/sh", "-c", "read _"], bwrap=bwrap),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    fds: list[tuple[int, int]] = []
    try:
        deadline = time.monotonic() + 30
        kids: list[int] = []
        while not kids and holder.poll() is None and time.monotonic() < deadline:
            # until bwrap has started the process inside the namespaces
            kids = _children(holder.pid)
            time.sleep(0.005)
        if not kids:
            raise UsageError("could not create the namespaces for the claim's ranks")
        shared = [("ipc", _CLONE_NEWIPC), ("pid", _CLONE_NEWPID)]
        if not network:  # else the host's network, as the plan allows
            shared.insert(0, ("net", _CLONE_NEWNET))
        for name, flag in shared:
            fds.append((os.open(f"/proc/{kids[0]}/ns/{name}", os.O_RDONLY), flag))
        libc = ctypes.CDLL(None, use_errno=True)

        def enter() -> None:
            for fd, flag in fds:
                if libc.setns(fd, flag) != 0:
                    raise OSError(ctypes.get_errno(), f"setns({flag:#x})")

        yield enter
    finally:
        for fd, _ in fds:
            os.close(fd)
        assert holder.stdin is not None
        holder.stdin.close()
        try:
            holder.wait(timeout=30)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()
