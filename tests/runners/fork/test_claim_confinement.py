"""A claim forked from the run's sandboxed fork server: its memory, its pid, its folder.

- A helper process the claim forks, fills and lets exit before the claim ends is
  counted in the outside view (the claim's cgroup), so an under-reported peak is
  inconclusive; the honest claim still passes.
- The claim process learns its pid as the host sees it (NVML's pids) from its
  client; without it, readings keyed on a pid are unavailable, never another's.
- A claim writes only its own folder in the run's: not another claim's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.execution.local_run import server_sandbox
from ledger.sandbox import Sandbox, find_bwrap, resolve
from runners.contract.result import CheckResult
from runners.fork.forkparent import ForkServer, client_argv
from runners.harness.cgroup import ClaimCgroup
from runners.harness.child import env as child_env
from tests.runners.claim.test_sandboxed_claim import _run

pytestmark = pytest.mark.skipif(
    find_bwrap() is None and os.environ.get("CI") != "true", reason="no bubblewrap"
)

# Forks a helper in setup() that fills {mib} MiB and exits before the claim ends.
HELPER = """
import os
from runners.workloads.moe import make_workload as _make

def make_workload(**params):
    w = _make(**params)
    setup = w.setup
    def helped(*a, **k):
        pid = os.fork()
        if pid == 0:
            b = b"\\x01" * ({mib} << 20)
            os._exit(0)
        os.waitpid(pid, 0)
        return setup(*a, **k)
    w.setup = helped
    return w
"""

# At import (in the server) nothing; in setup(), tries to write another claim's folder.
INTRUDER = """
import os
from runners.workloads.moe import make_workload as _make

def make_workload(**params):
    w = _make(**params)
    setup = w.setup
    def intruding(*a, **k):
        for target in {targets!r}:
            try:
                with open(target, "w") as f:
                    f.write("forged")
            except OSError:
                pass
        return setup(*a, **k)
    w.setup = intruding
    return w
"""


@pytest.fixture
def box() -> Sandbox:
    return resolve("auto")


@pytest.fixture
def run_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="ledger-run-"))
    yield d
    subprocess.run(["rm", "-rf", str(d)], check=False)


def _claim(box: Sandbox, run_dir: Path, tree: Path, ref: str) -> CheckResult:
    wrap = server_sandbox(box, run_dir, [tree])
    server = ForkServer.launch(
        [(str(tree), ref)],
        child_env(),
        wrap=wrap,
        sock_dir=run_dir,
        confine={"run_dir": str(run_dir)},
    ).wait()
    try:
        [r] = _run(tree, ref, artifact_dir=None, fork_server=server, sandbox=box, work_root=run_dir)
    finally:
        server.close()
    return r


@pytest.mark.skipif(ClaimCgroup.make("probe") is None, reason="no writable memory cgroup")
def test_memory_of_a_helper_forked_beside_the_claim_is_seen_from_outside(
    tmp_path: Path, box: Sandbox, run_dir: Path
) -> None:
    (tmp_path / "helper.py").write_text(HELPER.format(mib=700))
    r = _claim(box, run_dir, tmp_path, "helper:make_workload")
    assert r.outcome == "inconclusive", r.reason
    seen = r.measurements["outside_peak_bytes"]
    assert isinstance(seen, int) and seen >= 700 << 20
    assert "cgroup" in str(r.measurements["outside_peak_basis"])
    # The honest control: the same claim without the helper passes.
    (tmp_path / "honest.py").write_text(HELPER.format(mib=0))
    assert _claim(box, run_dir, tmp_path, "honest:make_workload").outcome == "passed"


def test_a_claim_cannot_write_another_claims_folder(
    tmp_path: Path, box: Sandbox, run_dir: Path
) -> None:
    # Another claim's folder in the same run, with its result, as the parent left it.
    other = run_dir / "ledger-claim-other"
    other.mkdir()
    (other / "result0.json").write_text("[]")
    targets = [str(other / "result0.json"), str(other / "extra.json"), str(run_dir / "x")]
    (tmp_path / "intruder.py").write_text(INTRUDER.format(targets=targets))
    r = _claim(box, run_dir, tmp_path, "intruder:make_workload")
    assert r.outcome == "passed", r.reason
    assert (other / "result0.json").read_text() == "[]"
    assert not (other / "extra.json").exists() and not (run_dir / "x").exists()


def test_the_forked_claim_process_knows_its_host_pid_and_nothing_else(
    tmp_path: Path, box: Sandbox, run_dir: Path
) -> None:
    (tmp_path / "probe_mod.py").write_text("make_workload = None\n")
    wrap = server_sandbox(box, run_dir, [tmp_path])
    server = ForkServer.launch(
        [(str(tmp_path), "probe_mod:make_workload")],
        child_env(),
        wrap=wrap,
        sock_dir=run_dir,
        confine={"run_dir": str(run_dir)},
    ).wait()
    claim = run_dir / "claim"
    claim.mkdir()
    req, res = claim / "request.json", claim / "result.json"
    req.write_text(json.dumps({}))
    # Made after the server started, as a claim's folder is: handed to its uid.
    box.hand_over(claim)
    try:
        client = subprocess.Popen(
            client_argv(server.sock, "tests.runners.fork.hostpid_probe", req, res),
            env={**child_env(), "PYTHONPATH": os.pathsep.join(sys.path)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert client.stdout is not None and client.stdout.readline().strip() == "ready"
        inside_host, inside_own = res.read_text().split()
        marker = int(Path(str(res) + ".pid").read_text())
        # What the claim process was told is the pid the host sees it as, and its own
        # pid is another (a pid namespace of its own).
        assert int(inside_host) == marker and inside_own != inside_host
        status = Path(f"/proc/{marker}/status").read_text()
        nspid = next(line for line in status.splitlines() if line.startswith("NSpid:"))
        assert nspid.split()[1:] == [inside_host, inside_own]
        assert client.stdin is not None
        client.stdin.close()
        assert client.wait() == 0
    finally:
        server.close()


def test_without_its_host_pid_a_pid_keyed_reading_is_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from runners.harness import hostpid, nvml

    monkeypatch.setenv(hostpid.PID_NAMESPACE_VAR, "1")
    monkeypatch.delenv(hostpid.HOST_PID_VAR, raising=False)
    assert hostpid.host_pid() is None

    class Proc:
        pid = os.getpid()  # a namespace's pid that happens to name a host process
        usedGpuMemory = 1 << 30

    class FakeNvml:
        def nvmlDeviceGetComputeRunningProcesses(self, _h: object) -> list[Proc]:
            return [Proc()]

    monkeypatch.setattr(nvml, "_nvml", lambda: FakeNvml())
    monkeypatch.setattr(nvml, "_handle", lambda _u: object())
    # Not this pid's figure: there is no knowing which process NVML means.
    assert nvml.process_used_bytes("GPU-x") is None
    # Handed in by the client for this very process, the reading is keyed on it.
    monkeypatch.setenv(hostpid.HOST_PID_VAR, str(os.getpid()))
    monkeypatch.setenv(hostpid.HOST_PID_VAR + "_OF", str(os.getpid()))
    assert nvml.process_used_bytes("GPU-x") == 1 << 30
    # A driver that names processes as this pid namespace sees them (an H200 host's,
    # driver 580): with the host pid known, this process's own pid is its entry too.
    monkeypatch.setenv(hostpid.HOST_PID_VAR, str(os.getpid() + 100000))
    assert hostpid.nvml_pids() == (os.getpid() + 100000, os.getpid())
    assert nvml.process_used_bytes("GPU-x") == 1 << 30
    # A child inheriting the variables is not the process they name.
    monkeypatch.setenv(hostpid.HOST_PID_VAR + "_OF", str(os.getpid() + 1))
    assert hostpid.host_pid() is None and hostpid.nvml_pids() == ()
    assert nvml.process_used_bytes("GPU-x") is None


def test_a_claim_started_afresh_learns_its_host_pid_from_the_parents_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runners.harness import hostpid

    monkeypatch.setenv(hostpid.PID_NAMESPACE_VAR, "1")
    monkeypatch.delenv(hostpid.HOST_PID_VAR, raising=False)
    note = tmp_path / "result0.json.host"
    # A link the claim's code planted where the note goes is never written through.
    victim = tmp_path / "victim"
    victim.write_text("kept")
    (tmp_path / "planted.host").symlink_to(victim)
    hostpid.write_note(str(tmp_path / "planted.host"), 4242)
    assert victim.read_text() == "kept"
    hostpid.adopt_note(str(tmp_path / "planted.host"))
    assert hostpid.host_pid() is None
    # The parent's note, once it saw the process from outside.
    hostpid.write_note(str(note), 4242)
    hostpid.adopt_note(str(note))
    assert hostpid.host_pid() == 4242 and hostpid.nvml_pids() == (4242, os.getpid())
