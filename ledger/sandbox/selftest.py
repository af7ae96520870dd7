"""The sandbox's self-test, run inside a sandbox before any pull-request code.

Each probe tries one door the sandbox must keep shut, with what the parent handed
it (a host key path, a host socket, the parent's pid and start time, a sibling
folder, a port on the host's loopback), and says whether it got through. One
positive control: the GPU device nodes it sees are exactly the ones it was
given, each opens, and where any was given NVML and CUDA count them (no silent
fall back to the CPU). It prints one JSON line, then waits for the parent to
read it from outside (the host uid, the capability sets, ``NSpid``) before it
exits: the parent closes its stdin.

Nothing here writes what a probe opened: a sysctl is opened for writing and
closed untouched, a folder gets an empty file that is removed again.

Standard library only, run as a file (``python -I -S selftest.py SPEC``).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import socket
import sys
from collections.abc import Callable
from typing import Any

SYSCTLS = ("/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches")
"""Two host-global sysctls: writable only by the host's root (the first runs a program
of its choice as root at the next crash, the second stalls every process)."""


def _opened_for_write(path: str) -> str | None:
    """Why ``path`` could be opened for writing (nothing is written), or None."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return None
    os.close(fd)
    return f"{path} opened for writing"


def _host_key(paths: list[str]) -> str | None:
    """A byte of any file under a secret path the policy hides. Where such a path lies
    inside a bound folder it is covered by an empty tmpfs (or /dev/null), which may hold
    the mount points of other covers: only a file's content counts as reached."""
    for p in paths:
        for f in _files(p):
            try:
                with open(f, "rb") as fh:
                    if fh.read(1):
                        return f"host secret {f} is readable"
            except OSError:
                continue
    return None


def _files(path: str, limit: int = 2000) -> list[str]:
    """The regular files at or below ``path`` (at most ``limit``), never through a link."""
    if os.path.isfile(path) and not os.path.islink(path):
        return [path]
    out: list[str] = []
    for here, _dirs, files in os.walk(path, followlinks=False):
        for name in files:
            f = os.path.join(here, name)
            if os.path.isfile(f) and not os.path.islink(f):
                out.append(f)
                if len(out) >= limit:
                    return out
    return out


def _host_socket(path: str, abstract: str) -> str | None:
    for name, address in ((path, path), ("@" + abstract, "\0" + abstract)):
        if not address.strip("\0"):
            continue
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            try:
                s.connect(address)
            except OSError:
                continue
            return f"host socket {name} accepted a connection"
    return None


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rpartition(")")[2].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _host_pid(pids: list[list[int]]) -> str | None:
    """A host process (the qualifier, the host's init) seen here: same pid, same start
    time, which a pid namespace of its own never shows."""
    for pid, started in pids:
        if _start_time(pid) == started:
            return f"host pid {pid} is visible"
    return None


def _sibling(folder: str) -> str | None:
    probe = os.path.join(folder, f".selftest-{os.getpid()}")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return None
    os.close(fd)
    os.unlink(probe)
    return f"sibling folder {folder} is writable"


def _root() -> str | None:
    """uid 0 gained by ``setuid``, or held with a capability. Whether this uid is the
    host's uid 0 only the host can say (`ledger.sandbox.proof.read_outside` reads it):
    from inside, a user namespace hides it by design."""
    before = os.getuid()
    if before != 0:
        try:
            os.setuid(0)
        except OSError:
            return None
        return f"setuid(0) succeeded from uid {before}"
    with open("/proc/self/status") as f:
        caps = [line.split()[1] for line in f if line.startswith("CapEff:")]
    if caps and int(caps[0], 16) != 0:
        return f"uid 0 with capabilities {caps[0]}"
    return None


CLONE_NEWUSER = 0x10000000
_SIGCHLD = 17
_CLONE = {"x86_64": 56, "aarch64": 220}
"""``clone``'s number where its first argument is the flags (as on these two)."""
_CLONE3 = 435


def _userns() -> str | None:
    """A user namespace made, by each way the kernel offers one: every sandbox is one
    host uid, and the namespaces one makes count against the quota all share. Each is
    tried in a child of this process, which exits at once: this one stays as it is."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    machine = os.uname().machine
    tries: list[tuple[str, Callable[[], int]]] = [
        ("unshare(CLONE_NEWUSER)", lambda: _forked(lambda: libc.unshare(CLONE_NEWUSER))),
    ]
    if machine in _CLONE:
        nr = _CLONE[machine]
        flags = ctypes.c_ulong(CLONE_NEWUSER | _SIGCHLD)
        tries.append(("clone(CLONE_NEWUSER)", lambda: _cloned(libc.syscall(nr, flags, 0, 0, 0, 0))))
        # struct clone_args: flags, pidfd, child_tid, parent_tid, exit_signal, stack,
        # stack_size, tls (the first version's 64 bytes).
        args = (ctypes.c_uint64 * 8)(CLONE_NEWUSER, 0, 0, 0, _SIGCHLD, 0, 0, 0)
        size = ctypes.c_size_t(ctypes.sizeof(args))
        tries.append(("clone3(CLONE_NEWUSER)", lambda: _cloned(libc.syscall(_CLONE3, args, size))))
    for name, attempt in tries:
        if attempt() == 0:
            return f"{name} made a user namespace"
    return None


def _forked(call: Callable[[], int]) -> int:
    """``call`` in a child: 0 where it returned 0 there."""
    pid = os.fork()
    if pid == 0:
        os._exit(0 if call() == 0 else 1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _cloned(pid: int) -> int:
    """After a raw clone (a fork with the flags asked): the child leaves at once; 0
    where it was made."""
    if pid == 0:
        os._exit(0)
    if pid < 0:
        return 1
    os.waitpid(pid, 0)
    return 0


def _network(port: int) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            return None
        return f"the host's loopback port {port} accepted a connection"


def _count(lib: str, init: str, count: str) -> int | None:
    try:
        so = ctypes.CDLL(lib)
        if getattr(so, init)(*([0] if init == "cuInit" else [])) != 0:
            return None
        n = ctypes.c_int() if count == "cuDeviceGetCount" else ctypes.c_uint()
        if getattr(so, count)(ctypes.byref(n)) != 0:
            return None
        return int(n.value)
    except (OSError, AttributeError):
        return None


def devices(given: list[str]) -> dict[str, Any]:
    """The positive control: which GPU device nodes are here, whether they open, and
    what NVML and CUDA count (only where any was given: loading CUDA costs time)."""
    here = sorted(f"/dev/{n}" for n in _listdir("/dev") if re.fullmatch(r"nvidia\d+", n))
    unopened = []
    for d in here + ([] if not here else ["/dev/nvidiactl"]):
        try:
            os.close(os.open(d, os.O_RDWR))
        except OSError as e:
            unopened.append(f"{d}: {errno.errorcode.get(e.errno or 0, e.errno)}")
    out: dict[str, Any] = {"seen": here, "unopened": unopened}
    if given:
        out["nvml"] = _count("libnvidia-ml.so.1", "nvmlInit_v2", "nvmlDeviceGetCount_v2")
        out["cuda"] = _count("libcuda.so.1", "cuInit", "cuDeviceGetCount")
    return out


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Every probe, in a fixed order: name -> what got through (None: refused)."""
    probes: list[tuple[str, Callable[[], str | None]]] = [
        ("sysctl:" + SYSCTLS[0].rsplit("/", 1)[1], lambda: _opened_for_write(SYSCTLS[0])),
        ("sysctl:" + SYSCTLS[1].rsplit("/", 1)[1], lambda: _opened_for_write(SYSCTLS[1])),
        ("host-key", lambda: _host_key(list(spec.get("keys", [])))),
        # An abstract socket lives in a network namespace: a claim the plan gives the
        # host's network shares the host's, so only a socket path is tried there.
        (
            "host-socket",
            lambda: _host_socket(
                spec["socket"], "" if spec.get("network") else spec.get("abstract", "")
            ),
        ),
        ("host-pid", lambda: _host_pid(list(spec.get("pids", [])))),
        ("sibling-folder", lambda: _sibling(spec["sibling"])),
        ("uid-0", _root),
        ("user-namespace", _userns),
    ]
    if not spec.get("network", False):
        probes.append(("network", lambda: _network(int(spec["port"]))))
    reached: dict[str, str | None] = {}
    for name, probe in probes:
        try:
            reached[name] = probe()
        except Exception as e:  # a probe that breaks says so; it proves nothing shut
            reached[name] = f"the probe failed: {type(e).__name__}: {e}"
    return {"probes": reached, "devices": devices(list(spec.get("devices", [])))}


CLAIM_PREFIX = "ledger-claim-"
"""The name of a claim's own pids cgroup (`ledger.sandbox.launcher.CLAIM_PIDS_PREFIX`;
this file imports nothing of Ledger's)."""


def claim_pids() -> tuple[str, str | None]:
    """From inside a claim process, before its code runs: the pids cgroup it is counted
    in, as its cgroup namespace shows it (the sandbox's own cgroup is ``/``; one outside
    the namespace reads ``/../...``), and why that is not a claim's own (None: it is).
    One small read: it runs in every forked claim."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError as e:
        return "", f"/proc/self/cgroup unreadable: {e.strerror}"
    found = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            found = path
            break
        if not controllers and found is None:
            found = path  # the unified hierarchy, where it holds the pids controller
    if found is None:
        return "", "no pids cgroup"
    if not found.rsplit("/", 1)[-1].startswith(CLAIM_PREFIX):
        return found, f"counted in pids cgroup {found}, not a claim's own"
    return found, None


def main(argv: list[str]) -> int:
    report = run(json.loads(argv[1]))
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
    # Alive until the parent has read this process's status from outside.
    sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
