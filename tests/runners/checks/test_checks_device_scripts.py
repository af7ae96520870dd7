"""The device scripts run on CPU and write JSON that round-trips to results."""

from __future__ import annotations

import json
from pathlib import Path

from scripts.device import gpu_smoke, mesh_handoff_2gpu


def test_gpu_smoke_on_cpu_writes_results_and_overhead(tmp_path: Path) -> None:
    out = tmp_path / "out"
    rc = gpu_smoke.main(
        ["--out", str(out), "--device", "cpu", "--size", "tiny", "--checks", "regression-24view"]
    )
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    assert [(r["check"], r["observer"]) for r in results] == [
        ("regression-24view", "on"),
        ("regression-24view", "off"),
        ("observer-off-control", "off"),
    ]
    assert all(r["outcome"] == "passed" for r in results), [r["reason"] for r in results]
    (art,) = results[0]["artifacts"]
    assert not Path(art["path"]).is_absolute() and (out / art["path"]).is_file()
    env = json.loads((out / "environment.json").read_text())
    assert env["device_kind"] == "cpu"
    o = json.loads((out / "overhead.json").read_text())
    assert len(o["bare_step_ns"]) == len(o["harness_step_ns"]) > 0
    assert all(isinstance(x, int) for x in o["bare_step_ns"] + o["harness_step_ns"])
    assert o["overhead_total_ns"] == o["harness_total_ns"] - o["bare_total_ns"]


def test_mesh_handoff_script_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "mesh"
    rc = mesh_handoff_2gpu.main(
        ["--out", str(out), "--device", "cpu", "--rows", "32", "--cols", "8", "--dtype", "float32"]
    )
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    assert [r["params"]["mode"] for r in results] == ["keep", "gather"]
    assert all(r["outcome"] == "inconclusive" for r in results)
    assert all(r["scope"]["device_kind"] == "cpu" for r in results)
