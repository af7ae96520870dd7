"""GPU health as evidence: NVML's readings of each claim's devices before and after it
ran, in every receipt (a summary in ``runner.environment``, the readings an artifact),
and a failure told from an infrastructure fault by them (docs/checks.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.fleet.faults import faults_of, summary
from tests.ledger.fleet.conftest import GPU_A, GPU_B, artifact, shown
from tests.ledger.fleet.fake_nvml import FakeDevice
from tests.ledger.helpers import run
from tests.ledger.probe_repo import claim, make_probe_repo


def _qualify(capsys: pytest.CaptureFixture[str], repo: Path) -> dict[str, str]:
    r = run(capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--gpus", "all", "--json")
    return {x["claim"]: x["id"] for x in json.loads(r.out)["receipts"]}


def test_every_receipt_records_its_devices_health_read_before_and_after_it_ran(
    tmp_path: Path,
    ledger_env: Path,
    gpus: list[FakeDevice],
    capsys: pytest.CaptureFixture[str],
) -> None:
    repo = make_probe_repo(tmp_path / "repo", claim("a.passes") + claim("b.passes"))
    ids = _qualify(capsys, repo)
    seen = set()
    for name in ("a.passes", "b.passes"):
        pred = shown(capsys, ids[name])
        assert pred["outcome"] == "passed"
        env = pred["runner"]["environment"]
        assert env["gpu_health"] == "clean (1 device(s))"
        assert env["dcgm_diag"] == "not installed"
        doc = artifact(capsys, tmp_path, pred, "gpu-health.json")
        [dev] = doc["devices"]
        assert dev["uuid"] == pred["runner"]["gpu_uuids"][0]
        seen.add(dev["uuid"])
        for when in ("before", "after"):
            got = dev[when]
            # What the driver answered, and "not supported" where it does not answer.
            assert got["ecc_mode"] == "enabled" and got["ecc_volatile_uncorrected"] == 0
            assert got["retired_pages_dbe"] == "not supported"
            assert got["retired_pages_pending"] == "not supported"
            assert got["remapped_rows_pending"] == "no" and got["remapped_rows_failed"] == "no"
            assert got["pcie_replay_count"] == 2 and got["mig_mode"] == "disabled"
            assert got["clock_event_reasons"] == ["gpu_idle"]
        assert dev["xids"] == [] and dev["dcgm_diag"]["result"] == "not installed"
    assert seen == {GPU_A, GPU_B}  # each claim's own device, not the host's first


@pytest.mark.parametrize(
    ("xid", "outcome", "named"),
    [
        (79, "infra-error", "XID 79 (GPU has fallen off the bus)"),
        (13, "failed", None),  # the code can cause it: still a counterexample
        (None, "failed", None),  # a clean device: the failure is the code's
    ],
)
def test_an_oom_is_infra_only_on_a_fault_the_code_cannot_cause(
    xid: int | None,
    outcome: str,
    named: str | None,
    tmp_path: Path,
    ledger_env: Path,
    gpus: list[FakeDevice],
    capsys: pytest.CaptureFixture[str],
) -> None:
    if xid is not None:
        gpus[0].xids = [xid]  # arrives while the claim on GPU 0 runs
    repo = make_probe_repo(tmp_path / "repo", claim("a.ooms", "oom"))
    pred = shown(capsys, _qualify(capsys, repo)["a.ooms"])
    assert pred["outcome"] == outcome, pred["reason"]
    env = pred["runner"]["environment"]
    if named is not None:
        assert named in pred["reason"] and "out of memory" in pred["reason"]
        assert env["gpu_health"].startswith("infra fault: " + named)
    elif xid is not None:
        assert "out of memory" in pred["reason"]
        assert env["gpu_health"] == f"fault: XID {xid} (graphics engine exception) on {GPU_A}"
    else:
        assert env["gpu_health"] == "clean (1 device(s))"


def test_an_uncorrectable_ecc_error_during_the_claim_or_a_failed_remap_is_infra() -> None:
    clean = {"ecc_aggregate_uncorrected": 0, "ecc_volatile_uncorrected": 0}

    def doc(before: dict[str, object], after: dict[str, object]) -> dict[str, object]:
        return {"devices": [{"uuid": "GPU-x", "before": before, "after": after, "xids": []}]}

    grew = doc(clean, {**clean, "ecc_aggregate_uncorrected": 1, "ecc_volatile_uncorrected": 1})
    assert [f.infra for f in faults_of(grew)] == [True, True]
    failed = doc(clean, {**clean, "remapped_rows_failed": "yes"})
    assert summary(failed) == "infra fault: a row remap failed on GPU-x"
    # Old history is a fault (the snapshot is not clean) but not this claim's infra.
    old = doc({**clean, "ecc_aggregate_uncorrected": 2}, {**clean, "ecc_aggregate_uncorrected": 2})
    assert [(f.infra, f.what) for f in faults_of(old)] == [
        (False, "2 uncorrectable ECC error(s) in the device's lifetime")
    ]
    # Unsupported readings are never read as numbers.
    ns = doc({"ecc_volatile_uncorrected": "not supported"}, {})
    assert faults_of(ns) == [] and summary(ns) == "clean (1 device(s))"
    assert summary({"error": "NVML not available", "devices": []}).startswith("not measured")


DCGMI = """#!/bin/sh
# dcgmi diag -r LEVEL -i INDEX: GPU 1's memory test fails.
echo "$@" >> "$(dirname "$0")/calls"
if [ "$5" = "1" ]; then echo "| Memory | Fail - GPU 1 |"; exit 226; fi
echo "| Memory | Pass |"
"""


def test_dcgmi_diag_runs_once_per_device_before_the_claims_and_a_failure_is_infra(
    tmp_path: Path,
    ledger_env: Path,
    gpus: list[FakeDevice],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dcgmi").write_text(DCGMI)
    (bin_dir / "dcgmi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    plan = claim("a.ooms", "oom") + claim("b.ooms", "oom") + claim("c.passes")
    repo = make_probe_repo(tmp_path / "repo", plan)
    r = run(capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--gpus", "all", "--json")
    # Once per device, not per claim: three claims, two devices, two diagnostics.
    assert (bin_dir / "calls").read_text().splitlines() == ["diag -r 1 -i 0", "diag -r 1 -i 1"]
    lines = r.err.splitlines()
    diag = [i for i, x in enumerate(lines) if "dcgmi diag -r 1 on gpu" in x]
    first = next(i for i, x in enumerate(lines) if "(cleanup) on gpu" in x)
    assert len(diag) == 2 and max(diag) < first, r.err
    by = {x["claim"]: shown(capsys, x["id"]) for x in json.loads(r.out)["receipts"]}
    on = {c: p["runner"]["gpu_uuids"][0] for c, p in by.items()}
    for c, p in by.items():
        env = p["runner"]["environment"]
        sick = on[c] == GPU_B
        assert env["dcgm_diag"] == f"-r 1: {on[c]} {'fail' if sick else 'pass'}"
        if p["outcome"] == "passed":
            continue
        # An OOM on the device DCGM failed is infra; on the healthy one, the code's.
        assert p["outcome"] == ("infra-error" if sick else "failed"), p["reason"]
        if sick:
            assert "dcgmi diag -r 1 failed before the claims" in p["reason"]
    assert {on["a.ooms"], on["b.ooms"]} == {GPU_A, GPU_B}


def test_a_claim_on_the_cpu_is_not_judged_by_the_hosts_gpus(
    tmp_path: Path,
    ledger_env: Path,
    gpus: list[FakeDevice],
    capsys: pytest.CaptureFixture[str],
) -> None:
    gpus[0].xids = [79]
    gpus[1].xids = [79]
    repo = make_probe_repo(tmp_path / "repo", claim("a.ooms", "oom"))
    r = run(capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--device", "cpu", "--json")
    pred = shown(capsys, json.loads(r.out)["receipts"][0]["id"])
    assert pred["outcome"] == "failed" and "gpu_health" not in pred["runner"]["environment"]
