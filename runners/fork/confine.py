"""What confines one claim forked from the fork server, beside the run's sandbox.

Claims of one run share the fork server's sandbox (its pid and mount
namespaces). Each forked claim process is therefore made three things here:

- the subreaper of what it starts (`subreaper`): a process that double-forks
  and calls ``setsid`` is still below it, and once the claim process exits the
  server ends whatever is left (`end_strays`), before the claim is reported done;
- the only writer of its own folder (`own_folder`): in a mount namespace of its
  own (inside a user namespace of its own, where the host allows one) the run's
  folder is read-only but for this claim's request/result folder and the
  artifact folder, so one claim cannot rewrite another's result;
- without any capability once that is set up (`drop_capabilities`): creating the
  namespaces gave it a full set inside them, which it gives up before any of the
  pull request's code runs.

Linux only; ctypes and the standard library.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Iterable
from pathlib import Path

from runners.harness.processes import proc_table

__all__ = ["children", "drop_capabilities", "end_strays", "own_folder", "subreaper"]

_PR_SET_CHILD_SUBREAPER = 36
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_CAP_VERSION_3 = 0x20080522
_LAST_CAP = 63

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_void_p,
]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def subreaper() -> None:
    """Orphans of this process's descendants are re-parented to it, not past it."""
    _check(_libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(PR_SET_CHILD_SUBREAPER)")


def children(pid: int | None = None) -> dict[int, str]:
    """The live child processes of ``pid`` (default: this process), with their
    command names, from /proc."""
    me = os.getpid() if pid is None else pid
    table = proc_table() or {}
    return {p: i.comm for p, i in table.items() if i.ppid == me and i.state != "Z"}


def end_strays(keep: Iterable[int], *, rounds: int = 1000) -> list[str]:
    """Kill and reap every child of this process not in ``keep``: what a finished
    claim left running was re-parented here (this process is their subreaper), and
    what those had started follows them up as each is killed. Returns each ended
    process as ``pid N (command)``."""
    kept = set(keep)
    ended: list[str] = []
    for _ in range(rounds):
        strays = {p: comm for p, comm in children().items() if p not in kept}
        if not strays:
            break
        for p, comm in strays.items():
            ended.append(f"pid {p} ({comm})")
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGKILL)
        for p in strays:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(p, 0)
    return ended


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def own_folder(run_dir: str, writable: Iterable[str]) -> None:
    """In a user and mount namespace of this process's own, make ``run_dir`` read-only
    but for ``writable`` (this claim's folder, the artifact folder). Raises OSError
    where the host allows no nested user namespace."""
    uid, gid = os.getuid(), os.getgid()
    _check(_libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS), "unshare(NEWUSER|NEWNS)")
    # The same ids inside as outside: files keep their owners.
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    mount = _libc.mount
    # Changes here must not propagate back to the server's namespace.
    _check(mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "mount(private)")
    root = os.fsencode(run_dir)
    # The run's folder bound onto itself with what is mounted below it (mounts that
    # came from a more privileged namespace are locked to their children), the
    # claim's own folders on top, then every mount in the run's folder but those
    # made read-only: a remount changes only the topmost mount at its path.
    _check(mount(root, root, None, _MS_BIND | _MS_REC, None), "bind run folder")
    own = [w for w in writable if os.path.isdir(w)]
    for w in own:
        b = os.fsencode(w)
        _check(mount(b, b, None, _MS_BIND | _MS_REC, None), f"bind {w}")
    ro = _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV
    for point in _mount_points():
        if _under(point, run_dir) and not any(_under(point, w) for w in own):
            _check(mount(None, os.fsencode(point), None, ro, None), f"read-only {point}")
    rw = _MS_REMOUNT | _MS_BIND | _MS_NOSUID | _MS_NODEV
    for w in own:
        _check(mount(None, os.fsencode(w), None, rw, None), f"writable {w}")


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _mount_points() -> list[str]:
    """Every mount point of this mount namespace, once each."""
    out: list[str] = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point not in out:
            out.append(point)
    return out


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


def drop_capabilities() -> None:
    """No capability in any set, the bounding set emptied, no ambient ones: what the
    namespaces gave this process it gives up before the claim's code runs."""
    for cap in range(_LAST_CAP + 1):
        # EINVAL past the kernel's last capability; EPERM once CAP_SETPCAP is gone.
        _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")
