"""`runners.api.run_claim`: the contract `ledger qualify` calls."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from runners.api import UnknownCheck, check_names, resolve_device, run_claim
from runners.checks.catalog import CHECKS
from tests.runners.conftest import MOE, REPO, TINY, RunClaim

SCOPE_FACETS = {
    "device_kind",
    "gpu_model",
    "gpu_count",
    "gpu_memory_bytes",
    "driver",
    "cuda",
    "torch",
    "nccl",
    "python",
    "packages_digest",
    "workload",
    "workload_digest",
    "dtype",
}


def test_check_names() -> None:
    assert check_names() == sorted(
        [
            "admission",
            "cleanup",
            "estimator-calibration",
            "full-prefix-backward",
            "gradient-compare",
            "mesh-handoff",
            "observer-off-control",
            "regression-24view",
        ]
    )
    for spec in CHECKS.values():
        assert spec.version and isinstance(spec.defaults, dict)


def test_unknown_check_raises(tmp_path: Path) -> None:
    with pytest.raises(UnknownCheck, match="no-such-check"):
        run_claim(
            claim="c",
            check="no-such-check",
            params={},
            repo_root=REPO,
            workload_ref=MOE,
            workload_params={},
            device="cpu",
            observer_off_required=False,
            base_root=None,
            progress=lambda _m: None,
            artifact_dir=tmp_path,
        )


def test_result_shape_scope_and_progress(run_cpu: RunClaim) -> None:
    said: list[str] = []
    (r,) = run_cpu("cleanup", progress=said.append)
    assert r.claim == "test.cleanup" and r.check == "cleanup" and r.check_version == "1"
    assert set(r.scope) >= SCOPE_FACETS
    assert r.scope["device_kind"] == "cpu" and r.scope["workload"] == "moe-lora"
    assert r.observer == "off" and r.host
    assert 0 < r.started_ns <= r.finished_ns
    assert said and any("cleanup" in m for m in said)
    assert r.params["batch"] == 2 and "determinism" in r.params
    json.dumps(dataclasses.asdict(r), allow_nan=False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_cuda_requested_without_cuda_is_infra_error(tmp_path: Path) -> None:
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cuda") is None
    (r,) = run_claim(
        claim="c",
        check="admission",
        params={},
        repo_root=REPO,
        workload_ref=MOE,
        workload_params=TINY,
        device="cuda",
        observer_off_required=False,
        base_root=None,
        progress=lambda _m: None,
        artifact_dir=tmp_path,
    )
    assert r.outcome == "infra-error" and "cuda" in (r.reason or "").lower()
    assert r.scope["device_kind"] == "cuda"
    (m,) = run_claim(
        claim="c",
        check="mesh-handoff",
        params={},
        repo_root=REPO,
        workload_ref=MOE,
        workload_params=TINY,
        device="cuda",
        observer_off_required=False,
        base_root=None,
        progress=lambda _m: None,
        artifact_dir=tmp_path,
    )
    assert m.outcome == "infra-error"


def test_observer_param_is_validated(run_cpu: RunClaim) -> None:
    with pytest.raises(ValueError, match="observer"):
        run_cpu("cleanup", {"observer": "maybe"})


def test_observer_on_without_control_is_one_result(run_cpu: RunClaim) -> None:
    (r,) = run_cpu("cleanup", {"observer": "on"})
    assert r.observer == "on" and r.outcome == "passed" and r.artifacts
    assert "observer" not in r.params


def test_importing_the_api_does_not_import_workloads() -> None:
    code = (
        "import sys, runners.api; "
        "print(any(m.startswith('runners.workloads.moe') for m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"
