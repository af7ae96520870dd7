"""The allow-list: every path a sandboxed process sees, and why it is there.

The sandbox starts from an empty root (bubblewrap's tmpfs) and binds in only
what is named here or handed to it by the caller (the interpreter, the trees
under qualification, the claim's own folders). Nothing of the host that is not
on the list is reachable: no `/run` or `/var/run` (the host's Unix sockets:
PostgreSQL, Docker, D-Bus), no `/home`, `/root`, host `/tmp`, no other run's
folder, no key wherever it lies. docs/security.md has the table, with the
reason for each entry.

Standard library only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

__all__ = ["ETC_FILES", "ETC_NETWORK_FILES", "SYSTEM_DIRS", "system_mounts"]

SYSTEM_DIRS: tuple[str, ...] = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
)
"""Executables and shared libraries: the dynamic loader, libc, the CUDA driver's
user-space libraries (libcuda, libnvidia-ml), `sh` for subprocesses. On a merged
/usr the top-level ones are symlinks into /usr and are recreated as symlinks."""

ETC_FILES: tuple[str, ...] = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/localtime",
    "/etc/alternatives",
)
"""What the loader and libc read: the library cache and its configuration, name
service lookups (`getpwuid` for the home and cache folders torch derives,
`localhost` for the ranks' rendezvous), the time zone, Debian's alternatives
symlinks. No `/etc/shadow`, `/etc/ssh`, no credentials."""

ETC_NETWORK_FILES: tuple[str, ...] = (
    "/etc/resolv.conf",
    "/etc/gai.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
)
"""Only for a claim the plan gives a network: DNS and the system's CA certificates."""


def system_mounts(*, network: bool, gpus: bool, extra_etc: Iterable[str] = ()) -> list[str]:
    """bubblewrap arguments for the system part of the allow-list, read-only: a
    symlink stays a symlink (a merged /usr), a missing path is skipped. With GPUs,
    /sys read-only too: the CUDA driver and NCCL read the PCI and NUMA topology
    there (nothing secret; still read-only)."""
    out: list[str] = []
    paths = [*SYSTEM_DIRS, *ETC_FILES, *extra_etc]
    if network:
        paths += ETC_NETWORK_FILES
    if gpus:
        paths.append("/sys")
    for p in paths:
        if os.path.islink(p) and p in SYSTEM_DIRS:
            out += ["--symlink", os.readlink(p), p]
        elif os.path.exists(p):
            out += ["--ro-bind", p, p]
    return out
