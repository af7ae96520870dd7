"""The H200 health run (`scripts/gpu_evidence.sh health`, evidence/h200-health*),
checked offline on CPU: every receipt carries its GPUs' NVML health, read before and
after its claim, as a summary in ``runner.environment`` and a signed artifact whose
bytes are committed beside it; `ledger fleet` counted the run.

Signatures, keys and the run's ledger are verified with every other run by
test_evidence.py. Runs only for the evidence folders committed.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
RUNS = sorted((ROOT / "evidence").glob("h200-health*"))
READINGS = {
    "ecc_mode",
    "ecc_volatile_uncorrected",
    "ecc_aggregate_uncorrected",
    "retired_pages_dbe",
    "retired_pages_pending",
    "remapped_rows_pending",
    "remapped_rows_failed",
    "clock_event_reasons",
    "temperature_c",
    "clock_sm_mhz",
    "persistence_mode",
    "mig_mode",
    "pcie_replay_count",
}


def _receipts(run: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted((run / "bundles").glob("*.json")):
        env = json.loads(json.loads(path.read_text())["entry"]["body"])
        out.append(json.loads(base64.b64decode(env["payload"]))["predicate"])
    return out


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_every_receipt_records_a_real_health_snapshot_of_its_gpus(run: Path) -> None:
    receipts = _receipts(run)
    assert receipts
    for p in receipts:
        env = p["runner"]["environment"]
        assert env["gpu_health"].startswith(("clean", "infra fault", "fault")), env
        assert "dcgm_diag" in env
        [a] = [a for a in p["artifacts"] if a["name"] == "gpu-health.json"]
        digest = a["digest"]["sha256"]
        raw = (run / "health" / f"{digest[:12]}.json").read_bytes()
        assert hashlib.sha256(raw).hexdigest() == digest  # the signed bytes
        doc = json.loads(raw)
        assert doc["source"] == "nvml" and doc["error"] is None
        assert [d["uuid"] for d in doc["devices"]] == p["runner"]["gpu_uuids"]
        for dev in doc["devices"]:
            for when in ("before", "after"):
                got = dev[when]
                assert set(got) >= READINGS, sorted(READINGS - set(got))
                # A reading is what the driver said: a number, a word, or not supported.
                for k, v in got.items():
                    assert (
                        isinstance(v, int | list)
                        or v
                        in (
                            "enabled",
                            "disabled",
                            "yes",
                            "no",
                            "not supported",
                        )
                        or str(v).startswith("unavailable: ")
                    ), (k, v)
            assert isinstance(dev["xids"], list | str)
        assert doc["started_ns"] <= doc["finished_ns"]


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_fleet_counted_the_run_per_gpu(run: Path) -> None:
    receipts = _receipts(run)
    doc = json.loads((run / "fleet.json").read_text())
    uuids = {u for p in receipts for u in p["runner"]["gpu_uuids"]}
    assert {d["uuid"] for d in doc["devices"]} == uuids
    assert sum(d["runs"] for d in doc["devices"]) == sum(
        len(p["runner"]["gpu_uuids"]) for p in receipts
    )
