"""`ledger profile` (one step attributed) and `ledger calibrate` (admission receipts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ledger.read.calibration import calibrate, render
from scripts.example_repo import make_example_repo
from tests.ledger.helpers import run

ROOT = Path(__file__).resolve().parents[3]


def _row(shape: str, phase: str, predicted: int, measured: int | None, **kw: object) -> dict:
    return {
        "shape": shape,
        "phase": phase,
        "predicted_bytes": predicted,
        "measured_bytes": measured,
        "admitted": kw.pop("admitted", True),
        "cold": kw.pop("cold", False),
        **kw,
    }


ROWS = [
    _row("1x16", "forward_nograd", 1000, 900, cold=True),
    _row("1x16", "forward_nograd", 1000, 500),
    _row("2x16", "forward_backward", 1000, 1100),  # admitted over its prediction
    _row("4x64", "forward_backward", 5000, 3000, admitted=False, over_refused=True),
    _row("8x64", "forward_backward", 9000, None, admitted=False),
]


def test_calibration_report_figures() -> None:
    pred = {"check": {"name": "admission"}, "measurements": {"shapes": ROWS}}
    other = {"check": {"name": "cleanup"}, "measurements": {}}
    doc = calibrate([("sha256:a", pred), ("sha256:b", other)])
    assert doc["receipts"] == ["sha256:a"] and doc["receipts_not_admission"] == 1
    first = doc["shapes"][0]
    assert (first["shape"], first["min_ratio"], first["max_ratio"], first["cold_max_ratio"]) == (
        "1x16",
        0.5,
        0.9,
        0.9,
    )
    assert doc["worst_ratio"] == 1.1 and doc["worst_at"] == "2x16 forward_backward"
    assert doc["admitted_over_prediction"] == 1 and doc["over_refused"] == 1
    assert doc["unmeasured"] == ["8x64 forward_backward"]
    text = render(doc)
    assert "1 admitted over prediction" in text and "no measurement" in text


def test_calibrate_reads_the_claims_admission_receipts(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    repo = make_example_repo(tmp_path / "repo").path
    m = tmp_path / "m.json"
    m.write_text(json.dumps({"shapes": ROWS}))
    common = ("--rev", "HEAD", "--repo", str(repo))
    r = run(capsys, "attest", "--unplanned", "--claim", "adm", "--check", "admission",
            *common, "--outcome", "failed", "--reason", "over", "--measurements", str(m),
            "--key", "runner")  # fmt: skip
    assert r.code == 0, r.err
    r = run(capsys, "calibrate", "--claim", "adm", *common, "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["worst_ratio"] == 1.1 and doc["unmeasured"] == ["8x64 forward_backward"]
    r = run(capsys, "calibrate", "--claim", "nope", *common)
    assert r.code == 1 and "no admission receipt" in r.err


def test_profile_attributes_the_peak(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("profile", "--workload", "runners.workloads.moe:make_workload", "--shape", "2x16",
            "--repo", str(ROOT), "--param", "d_model=32", "--param", "n_layers=1")  # fmt: skip
    r = run(capsys, *args, "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    att = doc["attribution"]
    assert doc["measured_increment_bytes"] == att["peak_bytes"] > 0
    assert 0 < doc["measured_over_predicted"] <= 1
    assert att["saved_for_backward_bytes"] + att["temporary_bytes"] == att["peak_bytes"]
    assert sum(att["by_op"].values()) <= att["peak_bytes"]
    assert any(name.startswith("model.layers.0") for name in att["by_module"])
    assert any(row["saved_for_backward"] for row in att["largest"])
    text = run(capsys, *args, "--warm").out
    assert "(warm)" in text and "by module:" in text and "largest live tensors" in text
    r = run(capsys, "profile", "--workload", "runners.workloads.moe:make_workload",
            "--shape", "2by16")  # fmt: skip
    assert r.code == 1 and "BATCHxSEQ" in r.err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where no GPU is present")
def test_profile_on_cuda_without_a_gpu_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    r = run(capsys, "profile", "--workload", "runners.workloads.moe:make_workload",
            "--shape", "2x16", "--repo", str(ROOT), "--device", "cuda")  # fmt: skip
    assert r.code == 2 and r.err.strip().splitlines() == [
        "ledger: --device cuda: no CUDA device is present"
    ]
