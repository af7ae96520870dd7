"""What confines one claim forked from the fork server, beside the run's sandbox.

Claims of one run share the fork server's sandbox (its pid and mount
namespaces). Each forked claim process is therefore made three things here:

- the subreaper of what it starts (`subreaper`): a process that double-forks
  and calls ``setsid`` is still below it, and once the claim process exits the
  server ends whatever is left (`end_strays`), before the claim is reported done;
- the only writer of its own folder (`own_folder`): the run's folder is
  read-only to it but for this claim's request/result folder and the artifact
  folder, so one claim cannot rewrite another's result. By Landlock where the
  kernel has it (no namespace needed: the sandbox lets no process make a user
  namespace, `ledger.sandbox.seccomp`), else in a mount namespace of its own
  inside a user namespace of its own, where the host allows one;
- without any capability once that is set up (`drop_capabilities`): creating the
  namespaces gave it a full set inside them, which it gives up before any of the
  pull request's code runs.

Linux only; ctypes and the standard library.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import stat
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


def own_folder(run_dir: str, writable: Iterable[str]) -> str:
    """Make ``run_dir`` read-only to this process and what it starts, but for
    ``writable`` (this claim's folder, the artifact folder): by Landlock
    (`_landlocked`), else in a user and mount namespace of its own. Returns which;
    raises OSError where neither is to be had here."""
    own = [w for w in writable if os.path.isdir(w)]
    try:
        _landlocked(run_dir, own)
        return "landlock"
    except OSError as e:
        if e.errno not in (errno.ENOSYS, errno.EOPNOTSUPP):
            raise
    _namespaced(run_dir, own)
    return "mount namespace"


# Landlock (linux/landlock.h): the system calls' numbers are the same on every
# architecture, as for every call added since 5.1.
_LANDLOCK_CREATE_RULESET, _LANDLOCK_ADD_RULE, _LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_FS_WRITE_FILE = 1 << 1
_FS_WRITES_V1 = sum(1 << b for b in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12))
"""write a file, remove a folder or file, make a device, folder, file, socket, FIFO,
block device or link: every way to change what a folder holds (ABI 1)."""
_FS_REFER = 1 << 13  # ABI 2: a link or rename into another folder
_FS_TRUNCATE = 1 << 14  # ABI 3


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


def _landlock(nr: int, *args: object) -> int:
    _libc.syscall.restype = ctypes.c_long
    rc = int(_libc.syscall(nr, *args))
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock ({nr}): {os.strerror(err)}")
    return rc


def _landlocked(run_dir: str, own: list[str]) -> None:
    """Landlock: every change to what a folder holds is refused but beneath ``own``
    and beneath everything that is not on the way to ``run_dir`` (each entry beside
    that way, from /, is allowed as before). Nothing under ``run_dir`` but ``own`` can
    be written, and a file made directly in a folder on the way (``/tmp/x`` where the
    run lies in /tmp) is refused too: the claim's HOME and TMPDIR are its scratch.
    ENOSYS or EOPNOTSUPP where the kernel has no Landlock."""
    abi = _landlock(_LANDLOCK_CREATE_RULESET, None, 0, _LANDLOCK_CREATE_RULESET_VERSION)
    handled = _FS_WRITES_V1 | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    attr = ctypes.c_uint64(handled)
    ruleset = _landlock(_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0)
    try:
        real = os.path.realpath(run_dir)
        allowed = [os.path.realpath(w) for w in own]
        for here in _ancestors_of(real):
            on_way = _next_on_way(here, real)
            for name in os.listdir(here):
                if name != on_way:
                    _allow(ruleset, os.path.join(here, name), handled)
        for w in allowed:
            _allow(ruleset, w, handled)
        _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        _landlock(_LANDLOCK_RESTRICT_SELF, ruleset, 0)
    finally:
        os.close(ruleset)


def _ancestors_of(path: str) -> list[str]:
    parts = path.strip("/").split("/")[:-1]
    return ["/"] + ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _next_on_way(folder: str, path: str) -> str:
    return path[len(folder.rstrip("/")) + 1 :].split("/", 1)[0]


def _allow(ruleset: int, path: str, handled: int) -> None:
    """Every handled right beneath ``path`` (a file: writing and truncating it); a link
    is passed over (what it names has a rule of its own, or is not writable)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return  # gone, or not this process's to reach
    try:
        st = os.fstat(fd)
        if stat.S_ISLNK(st.st_mode):
            return
        rights = handled if stat.S_ISDIR(st.st_mode) else handled & (_FS_WRITE_FILE | _FS_TRUNCATE)
        rule = _PathBeneath(rights, fd)
        _landlock(_LANDLOCK_ADD_RULE, ruleset, _LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule), 0)
    finally:
        os.close(fd)


def _namespaced(run_dir: str, own: list[str]) -> None:
    """In a user and mount namespace of this process's own, ``run_dir`` read-only but
    for ``own``. OSError where the host (or the sandbox) allows no nested user
    namespace."""
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
