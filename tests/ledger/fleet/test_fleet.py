"""`ledger fleet`: a flaky device told from a flaky claim by the receipts' health, and
`qualify --gpus all` leaving a quarantined device out."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ledger.fleet.report import fleet_report, wilson_lower
from tests.ledger.fleet.conftest import GPU_A, GPU_B
from tests.ledger.fleet.fake_nvml import FakeDevice
from tests.ledger.helpers import run
from tests.ledger.probe_repo import claim, make_probe_repo


def test_wilson_lower_bound() -> None:
    assert wilson_lower(0, 10) == 0.0 and wilson_lower(0, 0) == 0.0
    assert round(wilson_lower(5, 10), 4) == 0.2366
    assert round(wilson_lower(10, 10), 4) == 0.7225
    # One failure in one run is not read as a certain one.
    assert wilson_lower(1, 1) < 0.25


def _receipt(pr: int, uuid: str, outcome: str, health: str, claim: str = "c") -> dict[str, Any]:
    return {
        "claim": claim,
        "outcome": outcome,
        "source": {"pr": pr, "commit": "0" * 40},
        "runner": {"host": "h1", "gpu_uuids": [uuid], "environment": {"gpu_health": health}},
    }


def test_a_code_causable_xid_counts_against_a_device_only_under_two_pull_requests() -> None:
    x13 = f"fault: XID 13 (graphics engine exception) on {GPU_A}"
    once = fleet_report([_receipt(1, GPU_A, "failed", x13), _receipt(1, GPU_A, "failed", x13)])
    [dev] = once["devices"]
    assert (dev["failures"], dev["health_faults"], dev["device_faults"]) == (2, 2, 0)
    twice = fleet_report([_receipt(1, GPU_A, "failed", x13), _receipt(2, GPU_A, "failed", x13)])
    assert twice["devices"][0]["device_faults"] == 2
    # Beside it, per claim: one claim failing on a healthy device is the claim's.
    ok = "clean (1 device(s))"
    doc = fleet_report(
        [_receipt(3, GPU_B, "failed", ok, "flaky"), _receipt(4, GPU_B, "passed", ok, "steady")]
    )
    by_claim = {c["claim"]: c for c in doc["claims"]}
    assert by_claim["flaky"]["failures"] == 1 and by_claim["steady"]["failures"] == 0
    assert doc["devices"][0]["device_faults"] == 0


def test_fleet_reports_a_sick_gpu_and_qualify_gpus_all_skips_it_when_quarantined(
    tmp_path: Path,
    ledger_env: Path,
    gpus: list[FakeDevice],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GPU 1 has a row remap pending: a fault no code causes, in every snapshot.
    gpus[1].readings["remapped"] = (0, 0, 1, 0)
    repo = make_probe_repo(tmp_path / "repo", "".join(claim(f"c{i}") for i in range(4)))
    args = ("qualify", "--rev", "HEAD", "--repo", str(repo), "--json")
    assert run(capsys, *args, "--gpus", "all").code == 0
    r = run(capsys, "fleet", "--json", "--quarantine-above", "0.3")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    dev = {d["uuid"]: d for d in doc["devices"]}
    assert dev[GPU_A]["runs"] == 2 and dev[GPU_B]["runs"] == 2
    assert dev[GPU_A]["device_faults"] == 0 and dev[GPU_B]["device_faults"] == 2
    assert dev[GPU_B]["fault_rate_lower"] == round(wilson_lower(2, 2), 6)
    assert list(doc["quarantined"]) == [GPU_B]
    assert len(doc["claims"]) == 4 and all(c["failures"] == 0 for c in doc["claims"])
    text = run(capsys, "fleet", "--quarantine-above", "0.3").out
    assert f"{GPU_B}" in text and "QUARANTINED" in text and "per claim:" in text

    # Under a plan that quarantines above 0.3, GPU 1's receipts (not clean) count
    # for nothing; GPU 0's stand.
    plan = tmp_path / "quarantine.toml"
    plan.write_text("quarantine_above = 0.3\n" + (repo / "qualification.toml").read_text())
    r = run(capsys, "status", "--rev", "HEAD", "--repo", str(repo), "--plan", str(plan), "--json")
    rows = [x for x in json.loads(r.out)["claims"] if x["scope_role"] == "required"]
    states = sorted(row["state"] for row in rows)
    assert states == ["qualified", "qualified", "unverified", "unverified"], r.out
    reasons = [x for row in rows for x in row["reasons"] if x.startswith("quarantine:")]
    assert len(reasons) == 2 and all(f"quarantined GPU {GPU_B}" in x for x in reasons)

    monkeypatch.setenv("LEDGER_QUARANTINE_ABOVE", "0.3")
    r = run(capsys, *args, "--gpus", "all")
    assert r.code == 0, r.err
    assert f"gpu 1 ({GPU_B}) quarantined: fault rate >= 0.342 > 0.3" in r.err
    assert "skipped" in r.err
    on = {
        tuple(json.loads(run(capsys, "show", x["id"], "--json").out)["statement"]["predicate"][
            "runner"]["gpu_uuids"])
        for x in json.loads(r.out)["receipts"]
    }  # fmt: skip
    assert on == {(GPU_A,)}
    # Named one by one, a quarantined device runs, and the run says what it is.
    r = run(capsys, *args, "--gpus", "1", "--claim", "c0")
    assert r.code == 0 and "runs, as --gpus names it" in r.err
    monkeypatch.setenv("LEDGER_QUARANTINE_ABOVE", "2")
    r = run(capsys, *args, "--gpus", "all")
    assert r.code == 2 and "LEDGER_QUARANTINE_ABOVE='2'" in r.err


def test_fleet_diagnose_runs_dcgmi_level_2_on_each_gpu_of_this_host(
    tmp_path: Path,
    ledger_env: Path,
    gpus: list[FakeDevice],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dcgmi").write_text('#!/bin/sh\necho "$@" >> "$(dirname "$0")/calls"\n')
    (bin_dir / "dcgmi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    r = run(capsys, "fleet", "--diagnose", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert {u: d["result"] for u, d in doc["dcgm_diag"].items()} == {GPU_A: "pass", GPU_B: "pass"}
    assert (bin_dir / "calls").read_text().splitlines() == ["diag -r 2 -i 0", "diag -r 2 -i 1"]


def test_fleet_diagnose_without_dcgmi_says_nothing_was_diagnosed(
    tmp_path: Path,
    ledger_env: Path,
    gpus: list[FakeDevice],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    r = run(capsys, "fleet", "--diagnose", "--json")
    assert r.code == 0, r.err
    assert "dcgmi is not installed on this host" in r.err and "nothing was diagnosed" in r.err
    doc = json.loads(r.out)
    assert doc["dcgm_diag"] == {}
    assert doc["dcgm_diag_none"].startswith("dcgmi is not installed")
    text = run(capsys, "fleet", "--diagnose")
    assert text.code == 0 and "DCGM diagnostic: nothing diagnosed: dcgmi is not" in text.out


def test_fleet_diagnose_without_a_gpu_says_nothing_was_diagnosed(
    tmp_path: Path,
    ledger_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ledger.execution.devices import visible_gpus

    if visible_gpus():
        pytest.skip("a GPU is present")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dcgmi").write_text('#!/bin/sh\necho "$@" >> "$(dirname "$0")/calls"\n')
    (bin_dir / "dcgmi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    r = run(capsys, "fleet", "--diagnose", "--json")
    assert r.code == 0, r.err
    assert "no GPU is visible on this host" in r.err and "nothing was diagnosed" in r.err
    assert json.loads(r.out)["dcgm_diag"] == {} and not (bin_dir / "calls").exists()
