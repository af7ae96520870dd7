"""A claim process's word is bounded from outside, and its data never steers the parent."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ledger.sandbox import find_bwrap, resolve
from runners.claim.isolated import ClaimRequest, run_claim_isolated
from runners.contract.request import Claim
from runners.contract.result import CheckResult, Stamped
from runners.harness.outside import CPU_SLACK_BYTES, REPORTED

if TYPE_CHECKING:
    from ledger.sandbox import Sandbox
    from runners.fork.forkparent import ForkServer

# Under-reports its own peak: the harness's self-report, replaced at import.
LIAR = """
import runners.harness.selfview as _sv
from runners.workloads.moe import make_workload

_sv.peak_bytes = lambda: 1024
"""

# Names the runner's private key as one of its artifacts, in the result it writes.
FORGER = """
import json as _json
from runners.workloads.moe import make_workload

_dumps = _json.dumps

def _forged(obj, *a, **k):
    if isinstance(obj, list) and obj and isinstance(obj[0], dict) and "artifacts" in obj[0]:
        obj[0]["artifacts"].append({{"name": "log", "path": {key!r}, "media_type": "text/plain"}})
    return _dumps(obj, *a, **k)

_json.dumps = _forged
"""


def _run(
    root: Path,
    ref: str,
    *,
    sandbox: Sandbox | None = None,
    fork_server: ForkServer | None = None,
    **kw: Any,
) -> list[Stamped]:
    return run_claim_isolated(
        ClaimRequest(
            Claim(
                device="cpu",
                claim="cleanup.all-released",
                check="cleanup",
                params={"batch": 1, "seq": 8},
                workload_ref=ref,
                workload_params={},
                observer_off=False,
            ),
            repo_root=root,
            base_root=None,
            **kw,
        ),
        progress=lambda _m: None,
        sandbox=sandbox,
        fork_server=fork_server,
    )


def test_a_child_that_under_reports_its_peak_is_inconclusive_with_both_figures(
    tmp_path: Path,
) -> None:
    (tmp_path / "liar.py").write_text(LIAR)
    [r] = _run(tmp_path, "liar:make_workload", artifact_dir=None)
    assert r.outcome == "inconclusive", r.reason
    seen = r.measurements["outside_peak_bytes"]
    assert isinstance(seen, int) and seen > 1024 + CPU_SLACK_BYTES
    assert r.measurements[REPORTED] == 1024
    assert r.reason is not None
    assert "reported a peak of 1024 bytes" in r.reason and f"saw {seen} bytes" in r.reason
    # The honest harness, the same way, stays within the bound.
    [ok] = _run(Path(__file__).resolve().parents[3], "runners.workloads.moe:make_workload")
    assert ok.outcome == "passed", ok.reason
    reported, seen = ok.measurements[REPORTED], ok.measurements["outside_peak_bytes"]
    assert isinstance(reported, int) and isinstance(seen, int)
    assert seen <= reported + CPU_SLACK_BYTES


@pytest.mark.skipif(find_bwrap() is None, reason="no bubblewrap here")
def test_a_sandboxed_child_cannot_make_the_parent_read_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    key = keys / "runner.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\nSECRET-MATERIAL\n")
    code, art, work = tmp_path / "code", tmp_path / "art", tmp_path / "work"
    for d in (code, art, work):
        d.mkdir()
    (code / "forger.py").write_text(FORGER.format(key=str(key)))
    box = resolve("bwrap", environ={**os.environ, "LEDGER_KEYS": str(keys)})
    [r] = _run(code, "forger:make_workload", artifact_dir=art, sandbox=box, work_root=work)
    assert r.outcome == "failed"
    assert r.reason is not None and "is not a file inside the artifact folder" in r.reason
    assert "SECRET-MATERIAL" not in repr(r)


# Reports, at import, whether the host's loopback listener could be reached.
CALLER = """
import socket
from runners.harness import child
from runners.workloads.moe import make_workload

try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
    child.say("network: reached the host")
except OSError as e:
    child.say("network: none")
"""


@pytest.mark.skipif(find_bwrap() is None, reason="no bubblewrap here")
def test_a_claim_gets_the_network_only_when_it_says_so(tmp_path: Path) -> None:
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        (tmp_path / "caller.py").write_text(CALLER.format(port=listener.getsockname()[1]))
        box = resolve("bwrap")
        for network, said in ((False, "network: none"), (True, "network: reached the host")):
            msgs: list[str] = []
            run_claim_isolated(
                ClaimRequest(
                    Claim(
                        device="cpu",
                        claim="cleanup.all-released",
                        check="cleanup",
                        params={"batch": 1, "seq": 8},
                        workload_ref="caller:make_workload",
                        workload_params={},
                        observer_off=False,
                        network=network,
                    ),
                    repo_root=tmp_path,
                    base_root=None,
                    artifact_dir=None,
                ),
                progress=msgs.append,
                sandbox=box,
            )
            assert said in msgs, msgs


def test_on_cuda_the_bound_is_nvml_per_process_else_the_device_above_its_level() -> None:
    """The CUDA decision, with the figures NVML would give (no GPU needed)."""
    from runners.contract.result import CleanupProof
    from runners.harness.outside import CUDA_SLACK_BYTES, OutsideView, bound

    def result(reported: int) -> CheckResult:
        return CheckResult(
            claim="c",
            check="cleanup",
            check_version="1",
            params={},
            scope={"device_kind": "cuda"},
            outcome="passed",
            reason=None,
            measurements={REPORTED: reported},
            observer="off",
            cleanup=CleanupProof(complete=True),
        )

    gib = 1024**3
    view = OutsideView([1], [Path("/nonexistent")], gpu=[3 * gib], device_before=0)
    honest, liar = result(3 * gib - CUDA_SLACK_BYTES), result(gib)
    bound([honest, liar], view, 0, say=lambda _m: None)
    assert honest.outcome == "passed" and liar.outcome == "inconclusive"
    assert liar.reason is not None and f"saw {3 * gib} bytes" in liar.reason
    assert "per-process" in str(liar.measurements["outside_peak_basis"])
    # NVML does not show the pid: the device's used memory above its level before.
    view = OutsideView(
        [1], [Path("/nonexistent")], gpu=[None], device_before=gib, device_peak=5 * gib
    )
    liar = result(gib)
    bound([liar], view, 0, say=lambda _m: None)
    assert liar.outcome == "inconclusive" and liar.measurements["outside_peak_bytes"] == 4 * gib
    assert "device used memory" in str(liar.measurements["outside_peak_basis"])


# Leaves a process running that left the claim's process group (setsid, double fork);
# {escape}: first gives up being the subreaper of what it starts, so the orphan goes up
# past the claim process to the fork server.
ESCAPER = """
import ctypes, os, signal
from runners.workloads.moe import make_workload as _make

def make_workload(**params):
    if {escape}:
        ctypes.CDLL(None).prctl(36, 0, 0, 0, 0)
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            signal.pause()  # until it is found and killed
        os._exit(0)
    os.waitpid(pid, 0)
    return _make(**params)
"""


@pytest.mark.parametrize("escape", [False, True])
def test_a_process_left_behind_by_a_claim_is_named_ended_and_incomplete(
    tmp_path: Path, escape: bool
) -> None:
    from runners.fork.forkparent import ForkServer
    from runners.harness.child import env as child_env

    (tmp_path / "escaper.py").write_text(ESCAPER.format(escape=escape))
    server = ForkServer.launch([(str(tmp_path), "escaper:make_workload")], child_env()).wait()
    try:
        [r] = _run(tmp_path, "escaper:make_workload", artifact_dir=None, fork_server=server)
    finally:
        server.close()
    assert not r.cleanup.complete
    [below] = [x for x in r.cleanup.resources if x.id.startswith("below-fork-server:")]
    if escape:
        # Past the claim process: the fork server, the subreaper of every claim, ended it
        # before it reported the claim done, and named it.
        assert not below.released and "still running below the fork server" in below.proof
        assert "sent SIGKILL" in below.proof
    else:
        # The claim process is the subreaper of what it starts: the daemon stayed below
        # it, where the claim's own registry found and named it.
        leaks = [x for x in r.cleanup.resources if "LEAK" in x.proof]
        assert leaks and not leaks[0].released and below.released
    # Nothing of it is left anywhere: the claim's cgroup, where there is one, is empty.
    for x in r.cleanup.resources:
        if x.kind == "cgroup":
            assert x.released, x.proof
