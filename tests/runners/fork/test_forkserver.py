"""Claims forked from a preloaded server: same results, fresh processes, kill on timeout."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from runners.claim.isolated import ClaimRequest, run_claim_isolated
from runners.contract.forkwire import client_argv
from runners.contract.request import Claim
from runners.contract.result import check_result
from runners.fork.forkparent import ForkServer
from runners.harness.child import env, write_request

ROOT = Path(__file__).resolve().parents[3]
MOE = "runners.workloads.moe:make_workload"
TINY = {"d_model": 32, "n_layers": 1, "n_experts": 4, "d_ff": 32, "vocab": 64}


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServer]:
    s = ForkServer.launch([(str(ROOT), MOE)], env()).wait()
    yield s
    s.close()


def _run(
    server: ForkServer | None, check: str, params: dict, ref: str = MOE, timeout_s: float = 1800
) -> list:
    return run_claim_isolated(
        ClaimRequest(
            Claim(
                claim=f"t.{check}",
                check=check,
                params=params,
                workload_ref=ref,
                workload_params=TINY,
                device="cpu",
                observer_off=False,
                timeout_s=timeout_s,
            ),
            repo_root=ROOT,
            base_root=None,
            artifact_dir=None,
        ),
        progress=lambda _m: None,
        fork_server=server,
    )


def test_the_server_preloads_without_cuda(server: ForkServer) -> None:
    assert server.ready["preloaded"] == [MOE]
    assert server.ready["cuda_initialized"] is False


def test_a_forked_claim_passes_with_a_complete_proof(server: ForkServer) -> None:
    [r] = _run(server, "cleanup", {"batch": 1, "seq": 8})
    assert r.outcome == "passed", r.reason
    assert r.cleanup.complete
    [again] = _run(server, "regression-24view", {"views": 2, "seq": 8})
    assert again.outcome == "passed", again.reason
    # Each claim is its own process: the server itself ran no check.
    assert os.path.exists(f"/proc/{server.proc.pid}")
    # Where the claim's time went outside its check, in order, from the parent's launch.
    line = r.measurements["claim_timeline_ns"]
    assert list(line) == [
        "launched", "forked", "go", "serving", "device_ready", "fingerprinted",
        "check_started", "check_finished", "exited", "proved",
    ]  # fmt: skip
    assert line["launched"] == 0
    assert list(line.values()) == sorted(line.values())


def test_a_forked_claim_is_killed_on_timeout_and_the_server_serves_on(
    server: ForkServer,
) -> None:
    # Far more work than any machine does in 3 s, so the deadline always strikes first.
    params = {"batches": [1, 2, 4, 8], "seqs": [64, 128, 256], "warm_runs": 100_000}
    [r] = _run(server, "admission", params, timeout_s=3)
    assert r.outcome == "failed" and "timed out after 3 s" in (r.reason or "")
    [ok] = _run(server, "cleanup", {"batch": 1, "seq": 8})
    assert ok.outcome == "passed", ok.reason


def test_a_claim_computes_on_threads_after_the_server_did() -> None:
    # GNU OpenMP cannot fork after a parallel region: without the server's one thread,
    # this claim's first parallel region waits forever and the deadline kills it.
    import torch

    if torch.get_num_threads() < 2:
        pytest.skip("one CPU thread: no thread pool to inherit")
    ref = "tests.runners.fork.omp_workload:make_workload"
    s = ForkServer.launch([(str(ROOT), ref)], env(), prepare=[(str(ROOT), ref, TINY)]).wait()
    try:
        assert s.ready["prepared"] == [ref]
        [r] = _run(s, "cleanup", {"batch": 1, "seq": 8}, ref, timeout_s=120)
    finally:
        s.close()
    assert r.outcome == "passed", r.reason


def test_a_claims_timeline_keeps_only_its_own_stamps() -> None:
    from runners.harness.timeline import placed

    launched = 1_796_330_919_435_049_836
    parent = {"launched": launched, "exited": launched + 5, "proved": launched + 6}
    reported = {"forked": launched + 1, "bogus": 2**62, "text": "x", "flag": True, "go": 0}
    line = placed(reported, parent, (launched + 2, launched + 4))
    # Only what belongs to this claim, as small offsets a receipt can sign.
    assert line == {
        "launched": 0, "forked": 1, "check_started": 2,
        "check_finished": 4, "exited": 5, "proved": 6,
    }  # fmt: skip


@pytest.mark.parametrize("module", ["runners.rank", "runners.claim.isolated"])
def test_a_request_in_the_current_shape_is_served_under_either_name(
    server: ForkServer, tmp_path: Path, module: str
) -> None:
    """The fork client names the module a forked claim runs: `runners.rank`, the claim
    process's own room. A client that names the module it ran under before
    (`runners.claim.isolated`) is served the same request file the same way."""
    claim = Claim(
        claim="t.cleanup",
        check="cleanup",
        params={"batch": 1, "seq": 8},
        workload_ref=MOE,
        workload_params=TINY,
        device="cpu",
    )
    req, res = tmp_path / "request.json", tmp_path / "result.json"
    write_request(req, ClaimRequest(claim, repo_root=ROOT).body())
    done = subprocess.run(client_argv(server.sock, module, req, res), env=env(), check=False)
    assert done.returncode == 0
    [doc] = json.loads(res.read_text())
    assert check_result(doc).outcome == "passed", doc["reason"]


_EPOLL_WAIT = {"x86_64": (232, 281)}  # epoll_wait, epoll_pwait


def test_while_a_claim_runs_the_server_sleeps_until_it_exits(
    server: ForkServer, tmp_path: Path
) -> None:
    """The server wakes when a claim process exits (SIGCHLD), not on a timer: while one
    runs it waits with no timeout (its epoll_wait's fourth argument, as /proc shows
    the call it is blocked in), and the claim's end still reaches its client."""
    import platform

    calls = _EPOLL_WAIT.get(platform.machine())
    at = Path(f"/proc/{server.proc.pid}/syscall")
    if calls is None or not os.access(at, os.R_OK):
        pytest.skip("no epoll_wait number for this machine, or no /proc/PID/syscall")
    module = "tests.runners.fork.stdin_claim"
    argv = client_argv(server.sock, module, tmp_path / "q", tmp_path / "r")
    p = subprocess.Popen(argv, env=env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdin is not None and p.stdout is not None
    try:
        assert p.stdout.readline() == "started\n"  # the claim runs: the server waits
        while True:  # until the server is found in its wait (between two events)
            fields = at.read_text().split()
            if fields and fields[0].isdigit() and int(fields[0]) in calls:
                break
        # The timeout, an int: -1 (no look-up timer), not 50 (ms, a look every 50 ms).
        assert int(fields[4], 16) & 0xFFFFFFFF == 0xFFFFFFFF, fields
    finally:
        p.stdin.close()
    assert p.wait(timeout=120) == 0
