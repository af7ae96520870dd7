"""The checks on CUDA (skipped without a GPU; gpu2 tests need two)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch

from runners.contract.result import CheckResult
from runners.harness import CudaProbe, ResourceRegistry
from tests.runners.conftest import RunClaim

pytestmark = pytest.mark.gpu

LATTICE = {"batches": [1, 4], "seqs": [64, 256]}


def only(results: list[CheckResult]) -> CheckResult:
    assert len(results) == 1
    return results[0]


def test_cuda_probe_sample_and_window() -> None:
    probe = CudaProbe(torch.device("cuda"))
    s = probe.sample()
    assert s.total_bytes > 0 and s.free_bytes > 0
    assert s.outside_pool_bytes is not None and s.outside_pool_bytes > 0  # the context
    assert probe.uuid.startswith(("GPU-", "MIG-"))
    with probe.window() as w:
        x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    assert w.increment.increment_bytes >= 64 << 20
    del x


def test_cuda_registry_memory_back_to_baseline() -> None:
    probe = CudaProbe(torch.device("cuda"))
    with ResourceRegistry(probe=probe) as reg:
        reg.own_tensor("gpu-allocation", torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
    assert reg.proof is not None and reg.proof.complete, reg.proof
    ids = {r.id.rsplit(":", 1)[-1] for r in reg.proof.resources if r.kind == "gpu-memory"}
    assert {"allocated", "outside-pool"} <= ids


def test_admission_on_cuda_with_ballast(run_cuda: RunClaim) -> None:
    r = only(run_cuda("admission", LATTICE))
    assert r.outcome in ("passed", "failed"), r.reason
    assert r.scope["device_kind"] == "cuda" and r.gpu_uuids
    rows = r.measurements["shapes"]
    assert isinstance(rows, list)
    assert any(isinstance(x, dict) and x["ballast_bytes"] > 0 for x in rows)
    assert r.cleanup.complete, r.cleanup


def test_regression_and_full_prefix_on_cuda(run_cuda: RunClaim) -> None:
    r = only(run_cuda("regression-24view", {"seq": 64}))
    assert r.outcome == "passed", r.reason
    f = only(run_cuda("full-prefix-backward", {"batch": 4, "seq": 128}))
    assert f.outcome == "passed", f.reason


def test_gradient_compare_on_one_gpu(run_cuda: RunClaim) -> None:
    r = only(run_cuda("gradient-compare", {"batch": 2, "seq": 64}))
    assert r.outcome == "passed", r.reason
    m = r.measurements
    assert m["base_gpu_uuid"] == m["candidate_gpu_uuid"]
    assert m["base_reserved_at_start_bytes"] == m["candidate_reserved_at_start_bytes"]


def test_observer_on_writes_a_memory_snapshot(run_cuda: RunClaim) -> None:
    on, _off, control = run_cuda(
        "regression-24view", {"seq": 64, "observer": "on"}, observer_off_required=True
    )
    (art,) = on.artifacts
    with open(art.path, "rb") as f:
        snap = pickle.load(f)
    assert "segments" in snap and "device_traces" in snap
    assert control.outcome == "passed", control.reason


def test_cleanup_on_cuda(run_cuda: RunClaim) -> None:
    r = only(run_cuda("cleanup"))
    assert r.outcome == "passed", r.reason


@pytest.mark.gpu2
def test_mesh_handoff_on_two_gpus(run_cuda: RunClaim) -> None:
    r = only(run_cuda("mesh-handoff", {"mode": "keep"}))
    assert r.outcome == "passed", r.reason
    for rank in (0, 1):
        d = r.measurements[f"rank{rank}_first_allgather_outside_pool_bytes_delta"]
        assert isinstance(d, int)
    assert r.cleanup.complete


def test_artifacts_live_in_the_artifact_dir(run_cuda: RunClaim, artifact_dir: Path) -> None:
    (r,) = run_cuda("cleanup", {"observer": "on"})
    assert all(Path(a.path).parent == artifact_dir for a in r.artifacts)
