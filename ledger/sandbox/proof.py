"""The sandbox proves itself: its self-test, run and read, before any pull-request code.

`prove` starts `ledger.sandbox.selftest` under a policy exactly as that policy's
pull-request process will start (the same launcher, the same bubblewrap command
line but for the command), hands it a door of each kind to try, and reads its
processes from outside while they wait: the host uid and gid (never 0), the
capability sets (empty), ``NSpid`` (a pid namespace of its own), the user
namespace (never the host's). A sandbox through which anything was reachable
runs no pull-request code (`SandboxBreach`). The verdict goes into every
receipt the sandbox's code produced (`SelfTest.facts`).

Standard library only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ledger.evidence.errors import EXIT_INFRA, Error
from ledger.sandbox import pids
from ledger.sandbox.launcher import hand_over

__all__ = ["SandboxBreach", "SelfTest", "below", "policy_digest", "prove", "read_outside"]

SELFTEST = Path(__file__).with_name("selftest.py")
TIMEOUT_S = 120
"""Bound on the self-test (CUDA's initialisation inside it is the slow part)."""


class SandboxBreach(Error):
    """The self-test reached something, or did not run: nothing of the pull request
    runs there. The host's fault, never the code's: exit 3, which a retry may clear."""

    exit_code = EXIT_INFRA


@dataclass(frozen=True, slots=True)
class SelfTest:
    """What a sandbox's self-test found, read from inside and from outside."""

    policy: str
    """``sha256:`` of the policy it tested (`policy_digest`)."""
    refused: int
    probes: int
    reached: tuple[str, ...]
    """``name: what got through``, for each probe that was not refused."""
    devices: str
    """The positive control: ``devices as given`` or what differed."""
    host_uid: int
    outside: tuple[str, ...]
    """What the parent read from outside that must not be (uid 0, a capability, the
    host's pid or user namespace)."""
    userns: str = ""
    """How the sandbox was kept from making user namespaces (the probe
    ``user-namespace`` proves it); empty in a self-test of an earlier release."""
    pids: str = ""
    """The sandbox's process limit, and by what (read from outside where one applied)."""

    @property
    def ok(self) -> bool:
        return not self.reached and not self.outside and self.devices.endswith("as given")

    @property
    def summary(self) -> str:
        """One line, as every surface shows it."""
        head = f"self-test {self.refused} of {self.probes} refused, {self.devices}"
        bad = [*self.reached, *self.outside]
        return head if not bad else f"{head}; reached: {'; '.join(bad)}"

    def facts(self, mode: str = "bwrap") -> dict[str, str]:
        """The receipt's sandbox facts (the runner's environment, which every earlier
        release's verifier accepts with any key)."""
        facts = {
            "sandbox_selftest": f"{mode}, {self.summary}",
            "sandbox_policy": self.policy,
            "sandbox_host_uid": str(self.host_uid),
        }
        if self.userns:
            facts["sandbox_userns"] = self.userns
        if self.pids:
            facts["sandbox_pids"] = self.pids
        return facts


def policy_digest(policy: Any) -> str:
    doc = json.dumps(asdict(policy), sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(doc.encode()).hexdigest()


@contextlib.contextmanager
def _doors(uid: int, gid: int) -> Iterator[dict[str, Any]]:
    """A door of each kind, on the host, for the self-test to try: a Unix socket in a
    folder of the host's, an abstract one, a port on the host's loopback, a sibling
    folder the sandbox's uid owns (only the allow-list keeps it out)."""
    # In /tmp itself where there is one: a Unix socket's path has at most 107 bytes, and
    # TMPDIR may lie deep (a test's folder).
    home = Path(tempfile.mkdtemp(prefix="ledger-selftest-", dir=_short_tmp()))
    sibling = home / "sibling-claim"
    sibling.mkdir()
    if os.geteuid() == 0:
        hand_over([str(sibling)], uid, gid)
    os.chmod(home, 0o755)
    path = str(home / "host.sock")
    abstract = f"ledger-selftest-{os.getpid()}-{os.urandom(6).hex()}"
    with (
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix,
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as hidden,
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp,
    ):
        unix.bind(path)
        unix.listen(8)
        hidden.bind("\0" + abstract)
        hidden.listen(8)
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(8)
        try:
            yield {
                "socket": path,
                "abstract": abstract,
                "port": tcp.getsockname()[1],
                "sibling": str(sibling),
                "pids": [[p, t] for p in (os.getpid(), 1) if (t := _start_time(p)) is not None],
            }
        finally:
            shutil.rmtree(home, ignore_errors=True)


def _short_tmp() -> str | None:
    return "/tmp" if os.path.isdir("/tmp") and os.access("/tmp", os.W_OK) else None


def _start_time(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def below(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            kids.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def read_outside(pid: int, bwrap: str) -> tuple[list[str], int | None]:
    """What must not be, read from the host for ``pid``'s sandboxed processes (those in
    a user namespace other than the host's), and their host uid. bubblewrap's own
    outer process (its binary, in the host's pid namespace) is bubblewrap's, not the
    sandbox's."""
    outer = os.path.realpath(bwrap)
    host_ns = os.readlink("/proc/self/ns/user")
    bad: list[str] = []
    uid = None
    for p in below(pid):
        try:
            status = _status(p)
            ns = os.readlink(f"/proc/{p}/ns/user")
        except OSError:
            continue
        uids = status["Uid"].split()
        if "0" in uids or "0" in status["Gid"].split():
            bad.append(f"pid {p} runs as host uid/gid 0")
        if ns == host_ns:
            # The launcher's or bubblewrap's own process, before or beside the sandbox.
            continue
        uid = int(uids[0])
        for cap in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
            if int(status[cap], 16) != 0:
                bad.append(f"pid {p} holds capabilities ({cap} {status[cap]})")
        # Nothing regained at an exec: on the rootmap route the sandbox is root of its
        # namespace with its bounding set kept by bubblewrap, and no_new_privs is what
        # keeps an exec from handing that root its capabilities again.
        if status.get("NoNewPrivs") != "1":
            bad.append(f"pid {p} may gain privileges at exec (no_new_privs unset)")
        if len(status.get("NSpid", "").split()) < 2:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{p}/exe") == outer:
                    continue
            bad.append(f"pid {p} is in the host's pid namespace")
    return bad, uid


def _visible(env: Mapping[str, str]) -> int | None:
    """How many devices ``CUDA_VISIBLE_DEVICES`` leaves CUDA (None: not set, all)."""
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    n = 0
    for part in value.split(","):
        part = part.strip()
        if not part or part.startswith("-"):
            break  # CUDA stops at the first entry that names no device
        n += 1
    return n


def _devices(found: Mapping[str, Any], given: Sequence[str], env: Mapping[str, str]) -> str:
    want = sorted(d for d in given if d.rpartition("/")[2].removeprefix("nvidia").isdigit())
    seen = list(found.get("seen", []))
    if seen != want:
        return f"devices {seen or 'none'} where {want or 'none'} were given"
    if found.get("unopened"):
        return f"devices that do not open: {', '.join(found['unopened'])}"
    if not want:
        return "no devices, as given"
    if found.get("nvml") != len(want):
        return f"NVML sees {found.get('nvml') or 'no'} device(s) where {len(want)} were given"
    visible = _visible(env)
    cuda = found.get("cuda") or 0
    if visible is None and cuda == 0:
        return "CUDA sees no device where devices were given"
    if visible is not None and cuda != min(visible, len(want)):
        return f"CUDA sees {cuda} device(s) where CUDA_VISIBLE_DEVICES leaves {visible}"
    return f"{len(want)} devices as given"


def prove(
    policy: Any,
    bwrap: str,
    render: Callable[[list[str]], list[str]],
    keys: Sequence[str] = (),
) -> SelfTest:
    """Run the self-test under ``policy`` (a `ledger.sandbox.SandboxPolicy`), started by
    ``render`` (argv -> the command line that starts it under the policy, exactly as the
    pull request's process will start); its verdict. ``keys``: host secret paths the
    sandbox must not read."""
    digest = policy_digest(policy)
    try:
        return _prove(policy, digest, bwrap, render, keys)
    except OSError as e:
        # Not run is not passed: nothing of the pull request runs under the policy.
        raise SandboxBreach(f"the sandbox's self-test could not start: {e}") from None


def _prove(
    policy: Any,
    digest: str,
    bwrap: str,
    render: Callable[[list[str]], list[str]],
    keys: Sequence[str],
) -> SelfTest:
    with _doors(policy.host_uid, policy.host_gid) as doors:
        spec = {**doors, "keys": list(keys), "network": policy.network}
        spec["devices"] = list(policy.devices)
        argv = [sys.executable, "-I", "-S", str(SELFTEST), json.dumps(spec)]
        proc = subprocess.Popen(
            render(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            line = proc.stdout.readline()
            outside, uid = read_outside(proc.pid, bwrap)
            outside += _unlimited(proc.pid, policy.pids_max)
        finally:
            try:
                _, err = proc.communicate(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            if policy.pids_under is not None:
                pids.release(policy.pids_under, proc.pid)
    try:
        report = json.loads(line)
    except ValueError:
        why = (err or "").strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        raise SandboxBreach(f"the sandbox's self-test did not run: {why[0]}") from None
    probes: dict[str, str | None] = report["probes"]
    reached = tuple(f"{k}: {v}" for k, v in probes.items() if v is not None)
    return SelfTest(
        policy=digest,
        refused=len(probes) - len(reached),
        probes=len(probes),
        reached=reached,
        devices=_devices(report.get("devices", {}), policy.devices, dict(policy.env)),
        host_uid=-1 if uid is None else uid,
        outside=tuple(outside) if uid is not None else ("no sandboxed process was seen",),
        userns=USERNS_DENIED[policy.denial],
        pids=(
            f"pids.max {policy.pids_max} per sandbox (a {pids.kind(policy.pids_under)} pids"
            " cgroup of its own)"
            if policy.pids_max is not None and policy.pids_under is not None
            else NO_PIDS_LIMIT
        ),
    )


USERNS_DENIED = {
    "bwrap": "user namespaces denied by bubblewrap --disable-userns",
    "seccomp": (
        "user namespaces denied by a seccomp filter (clone and unshare with CLONE_NEWUSER, clone3)"
    ),
}
NO_PIDS_LIMIT = (
    "no process limit of its own: no pids cgroup Ledger may make here (RLIMIT_NPROC "
    "counts per uid, which every sandbox shares)"
)


def _unlimited(pid: int, most: int | None) -> list[str]:
    """Where ``most`` applies: each sandboxed process below ``pid`` that is not held to
    it, read from the host."""
    if most is None:
        return []
    host_ns = os.readlink("/proc/self/ns/user")
    bad = []
    for p in below(pid):
        try:
            if os.readlink(f"/proc/{p}/ns/user") == host_ns:
                continue
        except OSError:
            continue  # gone
        if pids.held(p) != most:
            bad.append(f"pid {p} is not held to pids.max {most}")
    return bad
