"""The one launcher every sandboxed process starts through: never host root.

`ledger.sandbox.render` puts it in front of every bubblewrap command line, so
each kind of process that runs or imports a pull request's code (fork servers,
fresh claims, every rank, the namespace holder of a claim's ranks, the doctor,
`ledger run` commands, the sandbox's self-test) starts the same way. Started by
root, in this order:

1. (the caller's ``preexec_fn`` has already joined the claim's cgroup: a join
   after the drop would fail); a pids cgroup of the sandbox's own is made and
   entered, where the spec names one (`limit_pids`, `ledger.sandbox.pids`);
2. a private mount namespace, in which the folders Ledger made for the sandbox
   are handed to the uid (never one a user named; never through a link or a hard
   link), and then every folder on the way to a bound path that the uid still
   could not traverse (``/root`` at mode 0700) is covered by a tmpfs holding only
   the bound paths, at the **same** paths they have outside (request files,
   ``pyvenv.cfg``'s ``home =`` and artifact paths are absolute); a bound folder
   is never covered, but one bound read-only that the uid cannot list (a 0700
   checkout) is opened up: a tmpfs over it with its entries bound back;
3. for the ranks of one claim, the holder's namespaces entered (below);
4. the drop: no supplementary groups, then the gid, then the uid, all three of
   each set, checked;
5. exec bubblewrap, unprivileged: it makes the user namespace itself (route
   ``userns``).

On every route the sandbox may make no user namespace of its own: bubblewrap's
``--disable-userns`` where the policy says so (`ledger.sandbox.render`), else the
seccomp filter the spec carries, handed to bubblewrap (`deny_userns`).

The ranks of one claim join one holder's user, pid, network and ipc namespaces
instead (`enter`): the holder is started on the ``rootmap`` route, so that root
of its user namespace is the unprivileged host uid, and each rank enters as that
root, never as the host's, before bubblewrap mounts a procfs of the joined pid
namespace and drops every capability.

Where the host refuses unprivileged user namespaces (an AppArmor restriction, a
gVisor host), route ``rootmap``: the launcher creates the user namespace itself
with a ``uid_map`` onto the unprivileged uid, and starts bubblewrap inside it.

Host uid 0 is refused outright, whatever the caller asks: the kernel lets a
global euid 0 write most sysctls (``kernel.core_pattern``) whatever the
capability sets say.

Standard library only, and run as a file (``python -I -S launcher.py SPEC --
BWRAP ...``): nothing of this project, nor of the environment, is imported.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import stat
import sys
from collections.abc import Iterable, Sequence

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_NEWIPC = 0x08000000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15

PIDS_PREFIX = "ledger-sandbox-"
"""The name of each sandbox's own pids cgroup, followed by its launcher's pid."""

CLAIM_PIDS_PREFIX = "ledger-claim-"
"""The name of a forked claim's pids cgroup below its sandbox's (`ledger.sandbox.claimpids`)."""

PIDS_LEAF = "ledger-leaf"
"""On cgroup v2, the leaf below a sandbox's pids cgroup that its own processes are in:
no process may sit in a cgroup whose children take a controller (the no-internal-process
rule), and its claims' cgroups are the leaf's siblings."""

REFUSED = 125
"""The launcher's own exit status when it will not start the sandbox (a reason on
stderr); bubblewrap's own failures exit 1."""

_libc = ctypes.CDLL(None, use_errno=True)


class LaunchError(Exception):
    """Why the sandbox was not started."""


def _check(rc: int, what: str) -> None:
    if rc != 0:
        e = ctypes.get_errno()
        raise LaunchError(f"{what}: {os.strerror(e)}")


def _mount(src: str | None, dst: str, fstype: str | None, flags: int, data: str | None) -> None:
    rc = _libc.mount(
        None if src is None else src.encode(),
        dst.encode(),
        None if fstype is None else fstype.encode(),
        ctypes.c_ulong(flags),
        None if data is None else data.encode(),
    )
    _check(rc, f"mount {dst}")


def traversable(path: str, uid: int, gid: int) -> bool:
    """Whether ``uid``/``gid`` (no supplementary groups) may search the folder."""
    st = os.stat(path)
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == gid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def _ancestors(path: str) -> list[str]:
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def blocked(paths: Iterable[str], uid: int, gid: int) -> dict[str, list[str]]:
    """For each topmost folder the uid cannot traverse, the bound paths below it
    (none below another: binding a folder brings what is inside it)."""
    tops: dict[str, list[str]] = {}
    listed = [os.path.normpath(p) for p in paths if p.startswith("/")]
    for p in listed:
        if not os.path.lexists(p):
            continue
        for a in _ancestors(p):
            if traversable(a, uid, gid):
                continue
            if a not in listed:
                tops.setdefault(a, []).append(p)
            # else: a bound folder is never covered (what is in it would be hidden):
            # the uid must be able to read it itself, and where it cannot, the sandbox
            # fails to start (its self-test says so).
            break
    for top, below in tops.items():
        below.sort(key=len)
        kept: list[str] = []
        for p in below:
            if not any(p == k or p.startswith(k + "/") for k in kept):
                kept.append(p)
        tops[top] = kept
    return tops


def reach(paths: Iterable[str], uid: int, gid: int) -> list[str]:
    """In this (private) mount namespace, cover each folder the uid cannot traverse
    with a tmpfs that holds only the bound paths below it, bound back at the same
    paths. Returns the covered folders."""
    tops = blocked(paths, uid, gid)
    for top, below in tops.items():
        # Held open across the cover: once the tmpfs is mounted the originals are
        # reachable only through these descriptors.
        held = {p: _hold(p) for p in below}
        _mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
        for p, what in held.items():
            _mkdirs(os.path.dirname(p))
            _bind_back(p, what)
    return sorted(tops)


def readable(path: str, uid: int, gid: int) -> bool:
    """Whether ``uid``/``gid`` may list and search the folder (read and execute)."""
    st = os.stat(path)
    if st.st_uid == uid:
        bits = stat.S_IRUSR | stat.S_IXUSR
    elif st.st_gid == gid:
        bits = stat.S_IRGRP | stat.S_IXGRP
    else:
        bits = stat.S_IROTH | stat.S_IXOTH
    return st.st_mode & bits == bits


def open_up(paths: Iterable[str], uid: int, gid: int) -> list[str]:
    """In this (private) mount namespace, make each read-only bound folder the uid
    cannot list (a checkout at mode 0700, a script's folder on ``sys.path``) listable:
    a tmpfs over it with each of its entries bound back at the same path, each entry
    keeping its own mode. Only for what is bound read-only: nothing written there
    could land in the folder. Returns the folders opened."""
    done = []
    for p in paths:
        p = os.path.normpath(p)
        if not os.path.isdir(p) or os.path.islink(p) or readable(p, uid, gid):
            continue
        held = {os.path.join(p, name): _hold(os.path.join(p, name)) for name in os.listdir(p)}
        _mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
        for q, what in held.items():
            _bind_back(q, what)
        done.append(p)
    return done


def _hold(path: str) -> int | str:
    """What lies at ``path``, held across a cover: a symbolic link as its target's text
    (recreated as a link, resolved inside the sandbox's own view, never followed here:
    a link in a checkout to a host file would otherwise bind that file in), anything
    else as an ``O_PATH`` descriptor opened without following a link."""
    if stat.S_ISLNK(os.lstat(path).st_mode):
        return os.readlink(path)
    return os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)


def _mkdirs(path: str) -> None:
    """``path`` and its missing parents at mode 0755, whatever the umask (under an
    umask of 027 ``os.makedirs`` would leave them untraversable to the uid)."""
    if os.path.isdir(path):
        return
    _mkdirs(os.path.dirname(path))
    os.mkdir(path)
    os.chmod(path, 0o755)


def _bind_back(path: str, what: int | str) -> None:
    """Bind what ``what`` holds (opened before a cover) at ``path`` again; a link's
    target text becomes a link again."""
    if isinstance(what, str):
        os.symlink(what, path)
        return
    st = os.fstat(what)
    if stat.S_ISLNK(st.st_mode):
        # Swapped for a link after it was looked at: not followed, not bound.
        os.close(what)
        return
    if stat.S_ISDIR(st.st_mode):
        _mkdirs(path)
    else:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644))
    _mount(f"/proc/self/fd/{what}", path, None, MS_BIND | MS_REC, None)
    os.close(what)


def unreadable(paths: Iterable[str], uid: int, gid: int) -> str | None:
    """Why ``uid``/``gid`` (no supplementary groups) cannot read one of ``paths`` (the
    interpreter, its standard library) in this mount namespace, after the covers:
    the path, its mode and owner, and the fix; None when it can read them all."""
    for path in paths:
        for here in [*_ancestors(path), path]:
            try:
                st = os.stat(here)
            except FileNotFoundError:
                break  # not on this host: bubblewrap says so itself
            if stat.S_ISDIR(st.st_mode):
                ok = traversable(here, uid, gid) and (here != path or readable(here, uid, gid))
            else:
                ok = _may_read(st, uid, gid)
            if not ok:
                return (
                    f"the sandbox's uid {uid} cannot read {here} (mode {st.st_mode & 0o7777:04o}, "
                    f"owner uid {st.st_uid}), which the interpreter needs: make it readable to "
                    f"others (chmod -R o+rX {here}); an install made under an umask of 027 "
                    "leaves it so"
                )
    return None


def _may_read(st: os.stat_result, uid: int, gid: int) -> bool:
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IRUSR)
    if st.st_gid == gid:
        return bool(st.st_mode & stat.S_IRGRP)
    return bool(st.st_mode & stat.S_IROTH)


def hand_over(paths: Iterable[str], uid: int, gid: int) -> None:
    """Give the folders Ledger made for the sandbox to the uid, with what is in them.
    Never through a symbolic link, never a file with another name elsewhere (a hard
    link a previous sandbox planted to a host file), never the folder's parents."""
    for top in paths:
        try:
            st = os.lstat(top)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            continue
        for here, dirs, files in os.walk(top, followlinks=False):
            for name in [*dirs, *files]:
                _give(os.path.join(here, name), uid, gid)
        _give(top, uid, gid)


def _give(path: str, uid: int, gid: int) -> None:
    st = os.lstat(path)
    if st.st_uid == uid and st.st_gid == gid:
        return
    if not stat.S_ISDIR(st.st_mode) and st.st_nlink > 1:
        return
    os.chown(path, uid, gid, follow_symlinks=False)


def enter(holder: int) -> int:
    """Join ``holder``'s user, network and ipc namespaces, as root of its user
    namespace: no supplementary groups (dropped while still the host's root), then uid
    and gid 0 there, which the holder's map makes the unprivileged host uid (the holder
    is started on the ``rootmap`` route). Returns a descriptor of its pid namespace,
    for bubblewrap's ``--pidns``: bubblewrap mounts a procfs of the pid namespace it
    joins itself (without one it binds the host's), with what root of the joined user
    namespace holds there, then drops every capability."""
    pidns = os.open(f"/proc/{holder}/ns/pid", os.O_RDONLY)
    fds = [
        (os.open(f"/proc/{holder}/ns/{ns}", os.O_RDONLY | os.O_CLOEXEC), flag)
        for ns, flag in (("user", CLONE_NEWUSER), ("net", CLONE_NEWNET), ("ipc", CLONE_NEWIPC))
    ]
    os.setgroups([])
    for fd, flag in fds:
        try:
            _check(_libc.setns(fd, flag), f"setns {flag:#x}")
        finally:
            os.close(fd)
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    if os.getresuid() != (0, 0, 0) or os.getgroups():
        raise LaunchError("the holder's namespaces were not entered as their root")
    os.set_inheritable(pidns, True)
    return pidns


def drop(uid: int, gid: int) -> None:
    """No supplementary groups, then every gid, then every uid; checked."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or os.getgroups():
        raise LaunchError("the drop to the unprivileged uid did not hold")
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise LaunchError("uid 0 could be regained after the drop")


def _rootmap(cmd: Sequence[str], uid: int, gid: int) -> int:
    """Route ``rootmap``: a child in a user namespace this process maps onto ``uid``
    (root inside, ``uid`` as the host sees it), bubblewrap started there; its exit
    status is this process's."""
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            os.close(to_child_w)
            os.close(to_parent_r)
            _check(_libc.unshare(CLONE_NEWUSER), "unshare user")
            os.write(to_parent_w, b"1")
            if os.read(to_child_r, 1) != b"1":
                os._exit(REFUSED)
            os.setresgid(0, 0, 0)
            os.setresuid(0, 0, 0)
            os.execv(cmd[0], list(cmd))
        except BaseException as e:
            os.write(2, f"ledger launcher: {e}\n".encode())
        os._exit(REFUSED)
    os.close(to_child_r)
    os.close(to_parent_w)
    if os.read(to_parent_r, 1) != b"1":
        os.waitpid(pid, 0)
        raise LaunchError("the user namespace could not be made")
    with open(f"/proc/{pid}/setgroups", "w") as f:
        f.write("deny")
    with open(f"/proc/{pid}/uid_map", "w") as f:
        f.write(f"0 {uid} 1\n")
    with open(f"/proc/{pid}/gid_map", "w") as f:
        f.write(f"0 {gid} 1\n")
    # This process stays (the map's writer must outlive the child's setup): it holds
    # nothing of the host a signal could not end, and forwards the polite ones. Named,
    # so that a reading from outside passes over it to the sandbox below
    # (`runners.harness.outside.LAUNCHER_NAME`).
    drop(uid, gid)
    _libc.prctl(PR_SET_NAME, b"ledger-launch")
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, lambda n, _f: os.kill(pid, n))
    os.write(to_child_w, b"1")
    os.close(to_child_w)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def deny_userns(program: bytes, cmd: list[str]) -> list[str]:
    """``cmd`` (a bubblewrap command line) with the seccomp filter that keeps the
    sandbox from making user namespaces (`ledger.sandbox.seccomp`): held in a memfd
    bubblewrap inherits and loads just before the sandbox's command (``--seccomp``)."""
    fd = os.memfd_create("ledger-userns-filter", 0)
    view = memoryview(program)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    os.set_inheritable(fd, True)
    return [cmd[0], "--seccomp", str(fd), *cmd[1:]]


def remove_claims(folder: str) -> None:
    """Remove the forked claims' pids cgroups below a sandbox's ``folder``, and its leaf
    on cgroup v2 (a cgroup with children cannot be removed); one that still holds a
    process stays."""
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            if name.startswith(CLAIM_PIDS_PREFIX) or name == PIDS_LEAF:
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(folder, name))


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def limit_pids(under: str, most: int) -> str:
    """Enter a pids cgroup of this sandbox's own below ``under`` with ``pids.max`` at
    ``most`` (everything it starts is counted there, not as its uid, which every
    sandbox shares). Those of launchers that ended are removed first (an empty
    cgroup cannot be removed by the sandbox it held). Returns its folder."""
    for name in os.listdir(under):
        ended = not os.path.exists(f"/proc/{name[len(PIDS_PREFIX) :]}")
        if name.startswith(PIDS_PREFIX) and ended:
            # One that still holds a process, or was removed meanwhile, stays as it is.
            remove_claims(os.path.join(under, name))
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(under, name))
    here = os.path.join(under, f"{PIDS_PREFIX}{os.getpid()}")
    if not os.path.isdir(here):
        os.mkdir(here)
    _write(os.path.join(here, "pids.max"), str(most))
    enter = here
    if os.path.exists(os.path.join(under, "cgroup.subtree_control")):
        # cgroup v2: the cgroup Ledger made hands its children the pids controller, and
        # this process waits in a leaf beside its claims' cgroups.
        _write(os.path.join(here, "cgroup.subtree_control"), "+pids")
        enter = os.path.join(here, PIDS_LEAF)
        if not os.path.isdir(enter):
            os.mkdir(enter)
    _write(os.path.join(enter, "cgroup.procs"), "0")
    return here


def launch(spec: dict[str, object], cmd: list[str]) -> int:
    """Start ``cmd`` (a bubblewrap command line) as ``spec`` says; returns only on the
    ``rootmap`` route or a refusal (the ``userns`` route execs)."""
    uid, gid = int(str(spec["uid"])), int(str(spec["gid"]))
    route = str(spec.get("route", "userns"))
    holder = spec.get("holder")
    if uid == 0 or gid == 0:
        raise LaunchError("the sandbox's host uid and gid must not be 0")
    needs = [str(p) for p in spec.get("needs", []) or []]  # type: ignore[attr-defined]
    if spec.get("seccomp"):
        cmd = deny_userns(bytes.fromhex(str(spec["seccomp"])), cmd)
    if os.geteuid() != 0:
        # Already unprivileged: nothing to drop, nothing to reach or hand over.
        if holder is not None:
            raise LaunchError("a claim's ranks share namespaces only where Ledger runs as root")
        why = unreadable(needs, os.getuid(), os.getgid())
        if why is not None:
            raise LaunchError(why)
        os.execv(cmd[0], cmd)
    pids = spec.get("pids")
    if isinstance(pids, dict):
        limit_pids(str(pids["under"]), int(str(pids["max"])))
    _check(_libc.unshare(CLONE_NEWNS), "unshare mount")
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    # Handed over first: a folder of Ledger's is then the uid's to traverse, and only
    # what no one handed over is reached through a cover.
    hand_over([str(p) for p in spec.get("hand", []) or []], uid, gid)  # type: ignore[attr-defined]
    reach([str(p) for p in spec.get("reach", []) or []], uid, gid)  # type: ignore[attr-defined]
    open_up([str(p) for p in spec.get("open", []) or []], uid, gid)  # type: ignore[attr-defined]
    # Said here, by path: from inside, a missing read shows only as an interpreter
    # that cannot find its own modules.
    why = unreadable(needs, uid, gid)
    if why is not None:
        raise LaunchError(why)
    if holder is not None:
        cmd = [cmd[0], "--pidns", str(enter(int(str(holder)))), *cmd[1:]]
    elif route == "rootmap":
        return _rootmap(cmd, uid, gid)
    elif route == "userns":
        drop(uid, gid)
    else:
        raise LaunchError(f"unknown route {route!r}")
    os.execv(cmd[0], cmd)
    return REFUSED  # not reached


def main(argv: Sequence[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        os.write(2, b"usage: launcher.py SPEC -- BWRAP ARGS...\n")
        return REFUSED
    try:
        return launch(json.loads(argv[1]), list(argv[3:]))
    except (LaunchError, OSError, ValueError, KeyError) as e:
        os.write(2, f"ledger launcher: {e}\n".encode())
        return REFUSED


if __name__ == "__main__":
    sys.exit(main(sys.argv))
