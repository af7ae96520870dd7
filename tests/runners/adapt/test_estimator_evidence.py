"""The built-in estimator's published table (benchmarks/estimator_accuracy.py), as
committed under evidence/: every shape reported and none dropped, each ratio the
integers' own, the summaries recomputed from the rows, and the figures docs/estimator.md
quotes."""

from __future__ import annotations

import json
import statistics
import tarfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
RUNS = sorted(ROOT.glob("evidence/*-estimator/estimator_accuracy.json"))
HELD_OUT = {"llama+lora", "mixtral", "vit", "cnn"}
DEVELOPMENT = {"gpt2", "qwen3_moe+lora"}
LATER = {"bert", "deit"}
"""Added since: BERT with method 5 (it informed that method: its backward at 8x128 on CPU
measured above the fresh envelope used beyond the grid), DeiT once method 5 was fixed."""


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def test_there_is_a_cpu_table() -> None:
    assert any(p.parent.name == "cpu-estimator" for p in RUNS), RUNS


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.parent.name)
def test_every_shape_is_reported_and_each_figure_is_its_own(path: Path) -> None:
    doc = _load(path)
    families = {f["family"]: f for f in doc["families"]}
    assert HELD_OUT | DEVELOPMENT <= set(families) <= HELD_OUT | DEVELOPMENT | LATER
    for name, f in families.items():
        assert f["role"] == ("held-out" if name in HELD_OUT | LATER else "development")
        rows = f["rows"]
        by_phase: dict[str, list[tuple[int, int]]] = {}
        for r in rows:
            by_phase.setdefault(r["phase"], []).append((r["batch"], r["seq"]))
            assert r["tokens"] == r["batch"] * r["seq"]
            assert r["measured_over_predicted"] == round(
                r["measured_bytes"] / r["predicted_bytes"], 4
            )
            assert r["point_bytes"] <= r["predicted_bytes"]
        # Ten or more shapes, the same in both phases: none dropped.
        assert set(by_phase) == {"forward_nograd", "forward_backward"}
        assert by_phase["forward_nograd"] == by_phase["forward_backward"]
        assert len(by_phase["forward_nograd"]) >= 10
        ratios = [r["measured_over_predicted"] for r in rows]
        s = f["summary"]
        assert s["shapes"] == len(rows)
        assert s["measured_above_predicted"] == sum(x > 1 for x in ratios)
        assert s["median_measured_over_predicted"] == round(statistics.median(ratios), 4)
        assert s["min_measured_over_predicted"] == min(ratios)
        # accelerate's rule for the same parameter counts, as the increment it implies.
        w = f["weights_bytes"]
        for r in rows:
            rule = w // 5 if r["phase"] == "forward_nograd" else 3 * w
            assert r["accelerate_increment_bytes"] == rule


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.parent.name)
def test_no_shape_measured_above_its_prediction(path: Path) -> None:
    # The bound the estimator states held at every shape of every family.
    for f in _load(path)["families"]:
        assert f["summary"]["measured_above_predicted"] == 0, f["family"]


def test_the_adapter_example_on_one_gpu_with_no_estimator_file() -> None:
    # evidence/h100-estimator/: the Qwen3-MoE + LoRA adapter example at --profile h200,
    # its estimator removed. Admission passed on the built-in bound, loose at this size
    # (docs/estimator.md quotes these figures); backward was refused before its target.
    here = ROOT / "evidence" / "h100-estimator"
    assert "NVIDIA H100 80GB HBM3" in (here / "nvidia-smi.csv").read_text()
    by = {p["claim"]: p for p in json.loads((here / "receipts.json").read_text())}
    adm = by["admission.no-oom-after-admit"]
    assert adm["outcome"] == "passed"
    m = adm["measurements"]
    assert (m["admitted_count"], m["refused_count"], m["counterexample_count"]) == (14, 1, 0)
    rows = [s for s in m["shapes"] if s.get("measured_bytes")]
    ratios = [s["measured_bytes"] / s["predicted_bytes"] for s in rows]
    points = [s["measured_bytes"] / s["point_bytes"] for s in rows]
    assert max(ratios) <= 1 and round(min(ratios), 3) == 0.080 and round(max(ratios), 3) == 0.212
    assert round(min(points), 2) == 0.60 and round(max(points), 2) == 1.57
    assert all(s["calibration"].startswith("sha256:") for s in rows)
    back = by["backward.full-prefix"]
    assert back["outcome"] == "refused"
    assert back["reason"] == (
        "target forward_backward 4x1024 refused after the prefix: "
        "predicted 83828118192 > usable 77550373632"
    )


def test_the_current_method_on_one_gpu() -> None:
    # evidence/h100-method2-estimator/: the same table and the same adapter example
    # under the current fit (a 7-step grid, calibration kept), on another H100. Still 0
    # of 140 shapes above predicted; ViT's smallest ratio 0.3535 (0.331 before), still
    # loose; the adapter's backward still refused, predicted 74.5 GiB (78.1 GiB before).
    here = ROOT / "evidence" / "h100-method2-estimator"
    assert "NVIDIA H100 80GB HBM3" in (here / "nvidia-smi.csv").read_text()
    doc = _load(here / "estimator_accuracy.json")
    assert sum(len(f["rows"]) for f in doc["families"]) == 140
    vit = next(f for f in doc["families"] if f["family"] == "vit")
    assert round(min(r["measured_bytes"] / r["predicted_bytes"] for r in vit["rows"]), 4) == 0.3535
    by = {p["claim"]: p for p in json.loads((here / "receipts.json").read_text())}
    m = by["admission.no-oom-after-admit"]["measurements"]
    assert (m["admitted_count"], m["refused_count"], m["counterexample_count"]) == (14, 1, 0)
    rows = [s for s in m["shapes"] if s.get("measured_bytes")]
    ratios = [s["measured_bytes"] / s["predicted_bytes"] for s in rows]
    points = [s["measured_bytes"] / s["point_bytes"] for s in rows]
    assert round(min(ratios), 3) == 0.084 and round(max(ratios), 3) == 0.219
    # The point estimate falls below measured at large shapes (1.85x); the stated error
    # above it is what keeps the bound: the bound holds, and is loose.
    assert round(min(points), 2) == 0.71 and round(max(points), 2) == 1.85
    back = by["backward.full-prefix"]
    assert back["outcome"] == "refused"
    assert back["reason"].endswith("predicted 80006368018 > usable 77550373632")


def _adapter(here: Path) -> tuple[dict[str, Any], list[float]]:
    by = {p["claim"]: p for p in json.loads((here / "receipts.json").read_text())}
    adm = by["admission.no-oom-after-admit"]
    m = adm["measurements"]
    assert adm["outcome"] == "passed" and m["calibration_source"] == "measured"
    assert (m["admitted_count"], m["refused_count"], m["counterexample_count"]) == (16, 0, 0)
    rows = [s for s in m["shapes"] if s.get("measured_bytes")]
    assert all(s["calibration"].startswith("sha256:") for s in rows)
    return by, [s["measured_bytes"] / s["predicted_bytes"] for s in rows]


def test_method3_on_one_gpu() -> None:
    # evidence/h100-method3-estimator/: the stated error in two parts. The adapter's
    # bounds, 0.084 to 0.219 of what was measured under method 2, are 0.568 to 0.869,
    # every shape admitted (none refused as beyond the card); ViT's backward still 0.376.
    here = ROOT / "evidence" / "h100-method3-estimator"
    assert "NVIDIA H100 80GB HBM3" in (here / "nvidia-smi.csv").read_text()
    doc = _load(here / "estimator_accuracy.json")
    vit = next(f for f in doc["families"] if f["family"] == "vit")
    assert vit["summary"]["min_measured_over_predicted"] == 0.3759
    by, ratios = _adapter(here)
    assert round(min(ratios), 3) == 0.568 and round(max(ratios), 3) == 0.869
    assert by["backward.full-prefix"]["outcome"] == "passed"


def _targets(doc: dict[str, Any]) -> None:
    """Issue 51's targets: every family 0 shapes above predicted, the median 0.8 or more
    and none below 0.5."""
    for f in doc["families"]:
        s = f["summary"]
        assert s["measured_above_predicted"] == 0, f["family"]
        assert s["median_measured_over_predicted"] >= 0.8, f["family"]
        assert s["min_measured_over_predicted"] >= 0.5, f["family"]


def _calibrated_in_the_first_attempt(adapter: dict[str, Any], low_s: float) -> None:
    """The calibration is measured in the claim's first admission: under 20 s there (its
    first attempt less the step and the edge search), and in no later attempt."""
    rows = adapter["admission.no-oom-after-admit"]["measurements"]["shapes"]
    first, *later = rows
    own = first["attempt_ns"] - first["duration_ns"] - first["edge_ns"]
    assert low_s * 1e9 < own < 20e9, own
    assert all(r["attempt_ns"] < 1e9 for r in later)


def _backward_passed_at(adapter: dict[str, Any], ratio: float) -> None:
    back = adapter["backward.full-prefix"]
    assert back["outcome"] == "passed"
    bm = back["measurements"]
    assert bm["target_measured_bytes"] <= bm["target_predicted_bytes"]
    assert round(bm["target_measured_bytes"] / bm["target_predicted_bytes"], 3) == ratio


def test_method4_on_one_gpu_meets_the_targets() -> None:
    # evidence/h100-method4-estimator/: the fit's columns scaled, the relative part 2 %
    # or more. Every family: 0 of its shapes above predicted, the median 0.8 or more and
    # none below 0.5 (ViT's backward 0.5233, from 0.3759), on one H100; the adapter
    # example admits all 16 steps at 0.609 to 0.983 of its bound and its full-prefix
    # backward passes, measured under the bound at its target.
    here = ROOT / "evidence" / "h100-method4-estimator"
    assert "NVIDIA H100 80GB HBM3" in (here / "nvidia-smi.csv").read_text()
    doc = _load(here / "estimator_accuracy.json")
    _targets(doc)
    vit = next(f for f in doc["families"] if f["family"] == "vit")
    assert vit["summary"]["min_measured_over_predicted"] == 0.5233
    by, ratios = _adapter(here)
    assert round(min(ratios), 3) == 0.609 and round(max(ratios), 3) == 0.983
    _calibrated_in_the_first_attempt(by, 10)
    _backward_passed_at(by, 0.941)


def test_method5_on_cpu_meets_the_targets() -> None:
    # evidence/cpu-estimator/: GPT-2's backward at 1x64, 0.478 of method 4's bound, is
    # 0.5577 of method 5's; BERT (added with method 5, which it informed) 0.5718.
    doc = _load(ROOT / "evidence" / "cpu-estimator" / "estimator_accuracy.json")
    assert doc["method"] == "5"
    _targets(doc)
    by = {f["family"]: f["summary"] for f in doc["families"]}
    assert set(by) == HELD_OUT | DEVELOPMENT | LATER
    assert by["gpt2"]["min_measured_over_predicted"] == 0.5577
    assert by["bert"]["min_measured_over_predicted"] == 0.5718
    # DeiT, added once method 5 was fixed and measured by it unchanged: a vision
    # transformer no method was made from.
    assert by["deit"]["min_measured_over_predicted"] == 0.5422
    assert by["deit"]["median_measured_over_predicted"] == 0.8858


def test_method5_on_one_gpu_meets_the_targets() -> None:
    # evidence/h100-method5-estimator/: seven families on one H100, BERT among them (added
    # with method 5, measured on a GPU once the method was fixed: median 0.8903, min
    # 0.6485); GPT-2's minimum 0.6196 (0.586 under method 4). The adapter example with
    # no estimator file: 16 of 16 steps admitted at 0.609 to 0.983 of their bound (its
    # backward has few gradients, LoRA's: method 4's figures), calibration 7.0 s in the
    # first admission, and the full-prefix backward passes at 0.941 of its bound.
    here = ROOT / "evidence" / "h100-method5-estimator"
    assert "NVIDIA H100 80GB HBM3" in (here / "nvidia-smi.csv").read_text()
    doc = _load(here / "estimator_accuracy.json")
    _targets(doc)
    # DeiT was added after this run.
    assert {f["family"] for f in doc["families"]} == HELD_OUT | DEVELOPMENT | {"bert"}
    # The method: the table predates its "method" field; the calibration the run kept
    # for the adapter (the id its receipts name) says 5.
    with tarfile.open(here / "run.tgz") as tar:
        kept = [
            json.load(f)
            for m in tar.getmembers()
            if m.name.startswith("run/calibration/") and (f := tar.extractfile(m)) is not None
        ]
    assert {d["version"] for d in kept} == {"5"}
    by = {f["family"]: f["summary"] for f in doc["families"]}
    assert by["bert"]["min_measured_over_predicted"] == 0.6485
    assert by["bert"]["median_measured_over_predicted"] == 0.8903
    assert by["gpt2"]["min_measured_over_predicted"] == 0.6196
    adapter, ratios = _adapter(here)
    assert round(min(ratios), 3) == 0.609 and round(max(ratios), 3) == 0.983
    _calibrated_in_the_first_attempt(adapter, 5)
    _backward_passed_at(adapter, 0.941)
