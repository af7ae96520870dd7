"""One sandbox never starves another.

Every sandbox runs as host uid 65534, and the kernel counts user namespaces and
processes per uid: a pull request made nested user namespaces until ``ENOSPC`` (about
96,000), after which a run forced onto the ``userns`` route could not be sandboxed
and a concurrent claim's self-test did not run. Each test makes the attack from
inside a sandbox, on every route (bubblewrap's own user namespace, the launcher's
``rootmap`` one, the ranks that join a claim's), and the same attempt outside (run
as root here) as the control, so a probe that failed for another reason cannot pass.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.evidence.errors import UsageError
from ledger.sandbox import Sandbox, find_bwrap, resolve
from ledger.sandbox import seccomp as filters
from ledger.sandbox.proof import NO_PIDS_LIMIT, SelfTest

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or (find_bwrap() is None and os.environ.get("CI") != "true"),
    reason="needs root (a pids cgroup and the rootmap route are root's) and bubblewrap",
)

UNSHARE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
made = 0
for _ in range({n}):
    pid = os.fork()
    if pid == 0:
        os._exit(0 if libc.unshare(0x10000000) == 0 else ctypes.get_errno())
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code:
        print("refused", os.strerror(code))
        break
    made += 1
else:
    print("made", made)
"""


def _control_unshare() -> None:
    """Outside any sandbox (root here) the same attempt makes one."""
    libc = ctypes.CDLL(None, use_errno=True)
    pid = os.fork()
    if pid == 0:
        os._exit(0 if libc.unshare(filters.CLONE_NEWUSER) == 0 else 1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def _in(box: Sandbox, tmp_path: Path, code: str, **policy: object) -> str:
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    p = box.policy(scratch=scratch).with_(**policy)
    argv, env = box.launch(p, [sys.executable, "-c", code], {})
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _box(route: str | None, denial: str | None = None, **env: str) -> Sandbox:
    """The sandbox on ``route`` (None: the first that works here), skipped where this
    host builds none there."""
    forced = {} if route is None else {"LEDGER_SANDBOX_ROUTE": route}
    try:
        box = resolve("auto", environ={**os.environ, **forced, **env})
    except UsageError as e:
        pytest.skip(f"no sandbox on the {route or 'any'} route here: {e}")
    assert route is None or box.base.route == route
    if denial is not None:
        box = Sandbox(box.mode, box.bwrap, box.base.with_(userns_denial=denial))
    return box


# How each denial answers: bubblewrap's lowers the namespace count allowed inside to
# what is there; the filter answers as the kernel does an unprivileged caller.
REFUSAL = {"bwrap": "No space left on device", "seccomp": "Operation not permitted"}
SAID = {"bwrap": "bubblewrap --disable-userns", "seccomp": "a seccomp filter"}


@pytest.mark.parametrize(
    ("route", "denial"),
    [
        ("userns", None),  # bubblewrap's --disable-userns where it has it (0.8 and later)
        ("userns", "seccomp"),  # as with a bubblewrap without it
        ("rootmap", None),
    ],
)
def test_no_route_lets_a_sandbox_make_a_user_namespace(
    tmp_path: Path, route: str, denial: str | None
) -> None:
    _control_unshare()
    box = _box(route, denial)
    how = box.base.denial
    assert _in(box, tmp_path, UNSHARE.format(n=3)) == f"refused {REFUSAL[how]}"
    [proof] = box.proofs.values()
    assert proof.ok and proof.summary.startswith("self-test 9 of 9 refused"), proof.summary
    assert SAID[how] in proof.facts()["sandbox_userns"]


def test_the_ranks_of_a_claim_cannot_make_a_user_namespace(tmp_path: Path) -> None:
    from ledger.sandbox.namespaces import shared_namespaces

    box = _box(None)
    assert box.bwrap is not None
    with shared_namespaces(box.bwrap, box.base) as holder:
        got = _in(box, tmp_path, UNSHARE.format(n=3), joined=True, holder=holder)
    assert got == "refused Operation not permitted"
    [proof] = box.proofs.values()
    assert proof.ok and "seccomp" in proof.facts()["sandbox_userns"]


# Each child stays until the parent has forked them all: it waits on a pipe the parent
# closes when it is done (an event, not a time).
FORKS = """
import os
r, w = os.pipe()
n = 0
try:
    for _ in range({n}):
        if os.fork() == 0:
            os.close(w)
            os.read(r, 1)
            os._exit(0)
        n += 1
except OSError as e:
    print("refused after", n, e.strerror)
else:
    print("forked", n)
os.close(w)
"""


def test_a_sandbox_is_held_to_its_own_process_limit(tmp_path: Path) -> None:
    box = _box(None, LEDGER_SANDBOX_PIDS_MAX="32")
    if box.base.pids_max is None:
        box.prove(box.policy(scratch=tmp_path))
        assert box.facts()["sandbox_pids"] == NO_PIDS_LIMIT
        pytest.skip("no cgroup v1 pids controller here: the receipt says there is no limit")
    got = _in(box, tmp_path, FORKS.format(n=100))
    # bubblewrap's two processes and the interpreter count too: its children stop short.
    assert got.startswith("refused after ") and got.endswith("Resource temporarily unavailable")
    assert int(got.split()[2]) < 32
    # A sandbox beside it is not starved: its own limit, its own count.
    other = _box(None, LEDGER_SANDBOX_PIDS_MAX="32")
    assert _in(other, tmp_path, FORKS.format(n=8)) == "forked 8"
    [proof] = box.proofs.values()
    assert (
        proof.facts()["sandbox_pids"]
        == "pids.max 32 per sandbox (a cgroup v1 pids cgroup of its own)"
    )


def test_the_self_test_catches_a_sandbox_that_may_make_a_user_namespace() -> None:
    from ledger.sandbox.selftest import _userns

    # Unsandboxed, as root: the probe makes one, so a refusal inside means something.
    assert _userns() == "unshare(CLONE_NEWUSER) made a user namespace"


def test_a_self_test_of_the_earlier_shape_keeps_its_facts() -> None:
    """A receipt made before this probe said 8 probes and no namespace or process
    line: its facts (and so every surface's reading of it) are as they were."""
    old = SelfTest("sha256:00", 8, 8, (), "no devices, as given", 65534, ())
    assert old.ok and old.facts() == {
        "sandbox_selftest": "bwrap, self-test 8 of 8 refused, no devices, as given",
        "sandbox_policy": "sha256:00",
        "sandbox_host_uid": "65534",
    }


def test_the_filter_is_whole_instructions_and_known_machines_only() -> None:
    for machine in ("x86_64", "aarch64"):
        prog = filters.program(machine)
        assert prog is not None and len(prog) % 8 == 0 and len(prog) // 8 < 64
    assert filters.program("s390x") is None


def test_the_process_limit_is_read_from_the_environment_or_the_hosts_pid_max() -> None:
    from ledger.sandbox import pids

    assert pids.most({"LEDGER_SANDBOX_PIDS_MAX": "64"}) == 64
    for bad in ("0", "-3", "many", "1e4"):
        with pytest.raises(UsageError, match="LEDGER_SANDBOX_PIDS_MAX must be a whole number"):
            pids.most({"LEDGER_SANDBOX_PIDS_MAX": bad})
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    assert pids.most({}) == max(pids.FLOOR, min(pids.DEFAULT_MOST, pid_max // 8))
