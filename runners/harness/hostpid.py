"""This process's pid as the host sees it, for readings keyed on a pid (NVML's
per-process GPU memory reports host pids).

Inside the sandbox the process has a pid namespace of its own: `os.getpid()` is
a pid the host does not know, and NVML's list names host pids. The parent
learns the host pid from outside and hands it in (`HOST_PID_VAR`, set by the
fork server's worker once its client has said it); a sandboxed process without
it reads ``None``: the reading is unavailable, never some other process's or the
device's.
"""

from __future__ import annotations

import os

__all__ = ["HOST_PID_VAR", "PID_NAMESPACE_VAR", "adopt_note", "host_pid", "nvml_pids", "write_note"]

HOST_PID_VAR = "SANDBOX_HOST_PID"
"""Set in a forked worker: its pid in the host's pid namespace."""
PID_NAMESPACE_VAR = "SANDBOX_PID_NAMESPACE"
"""Set by the sandbox (`ledger.sandbox.render`): pids here are not the host's."""


def host_pid() -> int | None:
    """This process's host pid; None where it cannot be known here."""
    given = os.environ.get(HOST_PID_VAR, "")
    if given.isdigit() and str(os.getpid()) == os.environ.get(HOST_PID_VAR + "_OF", ""):
        return int(given)
    if os.environ.get(PID_NAMESPACE_VAR):
        return None
    return os.getpid()


def nvml_pids() -> tuple[int, ...]:
    """The pids NVML may list this process under, in the order to try them: its host
    pid, then (inside the sandbox) its own, because a driver that knows pid
    namespaces names a process as the caller's namespace sees it (seen on an H200
    host, driver 580). Empty inside the sandbox while the host pid is unknown: the
    own pid alone could name a host process under a driver that does not translate."""
    own = os.getpid()
    if not os.environ.get(PID_NAMESPACE_VAR):
        return (own,)
    host = host_pid()
    if host is None:
        return ()
    return (host,) if host == own else (host, own)


def write_note(path: str, pid: int) -> None:
    """The parent's note of a sandboxed process's host pid, left in its claim folder
    (created fresh, never through a link the claim's code put there)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError:
        return
    try:
        os.write(fd, str(pid).encode())
    finally:
        os.close(fd)


def adopt_note(path: str) -> None:
    """Take the host pid the parent noted for this process (a claim started afresh in
    the sandbox learns it only once the parent has seen it from outside)."""
    if not os.environ.get(PID_NAMESPACE_VAR) or host_pid() is not None:
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    try:
        text = os.read(fd, 32).decode(errors="replace").strip()
    finally:
        os.close(fd)
    if text.isdigit():
        os.environ[HOST_PID_VAR] = text
        os.environ[HOST_PID_VAR + "_OF"] = str(os.getpid())
