"""The committed GPU evidence (evidence/*/) verifies offline on a CPU-only machine.

Each folder holds what one run on the GPU hosts produced: bundles signed
there, the public keys, the run's qualify output and its SQLite ledger.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ledger.evidence.keys import key_id, load_public_pem
from ledger.verify import verify_bundle
from tests.ledger.helpers import run

EVIDENCE = Path(__file__).resolve().parents[3] / "evidence"
RUNS = sorted(p for p in EVIDENCE.iterdir() if (p / "qualify.json").is_file())


def _statement(bundle: dict[str, Any]) -> dict[str, Any]:
    env = json.loads(bundle["entry"]["body"])
    return json.loads(base64.b64decode(env["payload"]))  # type: ignore[no-any-return]


def test_there_is_evidence() -> None:
    assert {p.name for p in RUNS} >= {"h200-run1", "h200-run4", "h200x2-mesh"}


def _claims(run_dir: str) -> dict[str, dict[str, Any]]:
    out = {}
    for path in (EVIDENCE / run_dir / "bundles").glob("*.json"):
        st = _statement(json.loads(path.read_text()))["predicate"]
        out.setdefault(st["claim"], st)
    return out


def test_run1_admission_counterexample_and_run4_qualified() -> None:
    first = _claims("h200-run1")["admission.no-oom-after-admit"]
    assert first["outcome"] == "failed"
    [cx] = [r for r in first["measurements"]["shapes"] if r["counterexample"]]
    assert (cx["predicted_bytes"], cx["usable_bytes"]) == (35_049_269, 37_041_306)
    assert cx["error"]["error_type"] == "OutOfMemoryError"
    assert (
        (EVIDENCE / "h200-run4" / "status.txt").read_text().splitlines()[0].endswith(": qualified")
    )
    last = _claims("h200-run4")
    adm = last["admission.no-oom-after-admit"]["measurements"]
    assert adm["counterexample_count"] == 0 and adm["admitted_count"] == 24
    assert adm["max_measured_over_predicted"] <= 1
    assert all(s["outcome"] == "passed" for s in last.values())
    assert all(s["cleanup"]["complete"] for s in last.values())


@pytest.mark.parametrize("run_dir", RUNS, ids=lambda p: p.name)
def test_every_receipt_verifies_offline_against_the_ledger_key(run_dir: Path) -> None:
    ledger_pub = load_public_pem((run_dir / "ledger.pub.pem").read_bytes())
    runner_id = key_id(load_public_pem((run_dir / "runner.pub.pem").read_bytes()))
    recorded = {r["id"]: r for r in json.loads((run_dir / "qualify.json").read_text())["receipts"]}
    bundles = sorted((run_dir / "bundles").glob("*.json"))
    assert len(bundles) == len(recorded)
    for path in bundles:
        rep = verify_bundle(path.read_bytes(), [ledger_pub])
        assert rep.anchor.startswith("ledger key ") and rep.signer == runner_id
        st = rep.statement["predicate"]
        assert recorded[rep.id]["outcome"] == st["outcome"]
        # Each run on the GPU its folder names (the later ones on an H100 host).
        model = "NVIDIA H100 80GB HBM3" if run_dir.name.startswith("h100-") else "NVIDIA H200"
        assert st["scope"]["device_kind"] == "cuda" and st["scope"]["gpu_model"] == model
        assert st["runner"]["gpu_uuids"], "GPU UUIDs recorded"
        tampered = bytearray(path.read_bytes())
        tampered[len(tampered) // 2] ^= 1
        with pytest.raises(Exception, match="bundle"):
            verify_bundle(bytes(tampered), [ledger_pub])


@pytest.mark.parametrize("run_dir", RUNS, ids=lambda p: p.name)
def test_the_run_ledger_audits_clean(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "ledger.db"
    shutil.copy(run_dir / "ledger.db", db)
    if (run_dir / "artifacts").is_dir():  # the artifact store beside the database
        shutil.copytree(run_dir / "artifacts", tmp_path / "artifacts")
    r = run(capsys, "audit", "--db", str(db), "--json")
    assert r.code == 0, r.out
    assert json.loads(r.out)["ok"] is True


def test_mesh_handoff_figures() -> None:
    """The 2-GPU run: an all-gather handoff leaves NCCL memory outside the pool
    that destroy_process_group does not return; the in-place handoff does not."""
    by_claim = {}
    for path in (EVIDENCE / "h200x2-mesh" / "bundles").glob("*.json"):
        st = _statement(json.loads(path.read_text()))["predicate"]
        by_claim[st["claim"]] = st
    gather = by_claim["mesh.handoff-allgather"]
    keep = by_claim["mesh.handoff-in-place"]
    assert gather["outcome"] == "failed" and keep["outcome"] == "passed"
    m = gather["measurements"]
    for rank in (0, 1):
        first = m[f"rank{rank}_first_allgather_outside_pool_bytes_delta"]
        left = m[f"rank{rank}_after_destroy_outside_pool_bytes_delta"]
        assert isinstance(first, int) and isinstance(left, int)
        assert first == 977_272_832 and left == 469_762_048
    assert gather["scope"]["gpu_count"] == 2 and gather["scope"]["backend"] == "nccl"
