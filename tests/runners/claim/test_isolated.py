"""Claims run in a child process: results come back intact, a dying child fails its claim."""

from __future__ import annotations

from pathlib import Path

import pytest

from runners.claim.isolated import ClaimRequest, run_claim_isolated
from runners.contract.request import Claim

KILLER = """
import os, signal
from runners.workloads.moe import make_workload as _make

def make_workload(**params):
    os.kill(os.getpid(), signal.SIGKILL)  # a crash no Python handler can catch
    return _make(**params)
"""


def _run(root: Path, ref: str, msgs: list[str]) -> list:  # type: ignore[type-arg]
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
            artifact_dir=None,
        ),
        progress=msgs.append,
    )


def test_results_and_progress_cross_the_process_boundary(tmp_path: Path) -> None:
    msgs: list[str] = []
    [r] = _run(Path(__file__).resolve().parents[3], "runners.workloads.moe:make_workload", msgs)
    assert r.outcome == "passed", r.reason
    assert any("cleanup" in m for m in msgs)
    own = r.cleanup.resources[-1]
    assert own.kind == "process" and own.released and "reaped" in own.proof
    assert r.cleanup.complete
    assert isinstance(r.measurements, dict) and r.scope["device_kind"] == "cpu"


def test_a_child_killed_by_a_signal_fails_its_claim(tmp_path: Path) -> None:
    (tmp_path / "killer.py").write_text(KILLER)
    msgs: list[str] = []
    [r] = _run(tmp_path, "killer:make_workload", msgs)
    # Its code can kill itself: its own outcome, not the host's infrastructure.
    assert r.outcome == "failed"
    assert r.reason is not None and "killed by signal 9" in r.reason
    assert r.cleanup.resources[-1].released and not r.cleanup.complete


def test_gpu_memory_counts_as_released_only_when_nvml_saw_it_return() -> None:
    from runners.claim.claim_exit import with_exit_proof
    from runners.contract.result import CleanupProof, ReleasedResource

    held = ReleasedResource(
        kind="gpu-memory",
        id="GPU-1:outside-pool",
        released=False,
        proof="delta 167772160 > tolerance 67108864",
    )
    tmp = ReleasedResource(kind="tempdir", id="/tmp/x", released=True, proof="gone")
    proof = CleanupProof(complete=False, resources=[held, tmp])
    own = ReleasedResource(kind="process", id="42", released=True, proof="reaped")
    returned = with_exit_proof(proof, [own], (True, "pid absent; GPU-1: +0 bytes"))
    assert returned.complete and all(r.released for r in returned.resources)
    assert "held by the claim process until it exited" in returned.resources[0].proof
    kept = with_exit_proof(proof, [own], (False, "pid still in NVML's compute processes"))
    assert not kept.complete and not kept.resources[0].released
    no_nvml = with_exit_proof(proof, [own], None)
    assert not no_nvml.complete


def test_cleanup_verdict_follows_the_whole_proof() -> None:
    from runners.claim.claim_exit import cleanup_verdict, with_exit_proof
    from runners.contract.result import CheckResult, CleanupProof, ReleasedResource

    held = ReleasedResource(
        kind="gpu-memory", id="GPU-1:outside-pool", released=False, proof="delta > tolerance"
    )
    own = ReleasedResource(kind="process", id="7", released=True, proof="reaped")

    def result(at_exit: tuple[bool, str] | None) -> CheckResult:
        r = CheckResult(
            claim="c",
            check="cleanup",
            check_version="1",
            params={},
            scope={},
            outcome="failed",
            reason="cleanup incomplete",
            measurements={},
            observer="off",
            cleanup=CleanupProof(complete=False, resources=[held]),
        )
        r.cleanup = with_exit_proof(r.cleanup, [own], at_exit)
        cleanup_verdict(r)
        return r

    assert result((True, "returned")).outcome == "passed"
    kept = result((False, "still held"))
    assert kept.outcome == "failed" and kept.reason and "GPU-1:outside-pool" in kept.reason


def test_a_host_out_of_disk_is_an_infrastructure_error_and_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The disk is outside the product: its free space is what the host reports.
    import shutil

    from runners.claim import claim_launch

    monkeypatch.setattr(
        shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(1 << 30, 1 << 30, 1024)
    )  # type: ignore[attr-defined]
    (tmp_path / "killer.py").write_text(KILLER)
    msgs: list[str] = []
    [r] = _run(tmp_path, "killer:make_workload", msgs)
    # The parent's own reading before anything started: never laid at the code's door.
    assert r.outcome == "infra-error", (r.outcome, r.reason)
    assert r.reason is not None and r.reason.startswith("the host is out of disk: 1024 bytes")
    assert claim_launch._MIN_FREE_BYTES > 1024
