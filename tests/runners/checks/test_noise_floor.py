"""Numerics judged against the noise floor measured in the same run."""

from __future__ import annotations

from typing import Any

from runners.checks.noise import by_family, family, judge, threshold_for, verdict_of
from tests.runners.checks.test_checks import only
from tests.runners.conftest import RunClaim

NOISY = "runners.workloads.broken:noisy_gradients"


def test_families_fold_layer_indices() -> None:
    assert family("layers.0.attn.q.lora_A") == family("layers.11.attn.q.lora_A")
    assert family("layers.3.experts.7.w") == "layers.*.experts.*.w"
    assert family("head2.weight") == "head2.weight"


def test_judge_against_threshold_and_margin() -> None:
    assert judge(0.0, 0.5, 0.1, 2.0) == "failed"
    assert judge(0.3, 0.5, 0.1, 2.0) == "inconclusive"  # the noise alone is over threshold
    assert judge(0.06, 0.11, 0.1, 2.0) == "passed"  # over threshold, within 2x the noise
    assert judge(0.04, 0.09, 0.5, 2.0) == "passed"
    assert judge(None, None, 0.1, 2.0) == "failed"
    rows = by_family({"a.0.w": 0.0, "a.1.w": 0.01}, {"a.0.w": 0.5, "a.1.w": 0.0}, 0.1, 2.0)
    assert [(r.family, r.tensors, r.noise, r.diff, r.state) for r in rows] == [
        ("a.*.w", 2, 0.01, 0.5, "failed")
    ]
    assert verdict_of(rows) == "failed"


def test_thresholds_default_per_dtype() -> None:
    assert threshold_for("float32", None, 1e-4, 3e-2) == 1e-4
    assert threshold_for("bfloat16", None, 1e-4, 3e-2) == 3e-2
    assert threshold_for("bfloat16", 0.5, 1e-4, 3e-2) == 0.5


def _grad(run_cpu: RunClaim, **params: Any) -> Any:
    params = {"batch": 1, "seq": 8, "rule": "threshold", **params}
    return only(run_cpu("gradient-compare", params, ref=NOISY))


def test_noise_over_the_threshold_is_inconclusive(run_cpu: RunClaim) -> None:
    r = _grad(run_cpu)  # 1e-3 noise against the fp32 threshold 1e-4
    assert r.outcome == "inconclusive", r.reason
    assert "noise floor over the threshold" in (r.reason or "")
    fams = r.measurements["families"]
    assert all(f["noise_floor"] > 1e-4 for f in fams if f["family"].endswith("lora_B"))


def test_same_code_under_noise_passes_and_a_real_change_fails(run_cpu: RunClaim) -> None:
    r = _grad(run_cpu, threshold=1e-2)
    assert r.outcome == "passed", r.reason
    assert r.measurements["max_noise_rel_l2"] > 0
    r = _grad(run_cpu, threshold=1e-2, candidate_workload_params={"perturb": 0.5})
    assert r.outcome == "failed", r.reason
    assert "noise floor" in (r.reason or "")


def test_reference_rule_takes_the_larger_floor(run_cpu: RunClaim) -> None:
    """Nondeterministic gradients (1e-3 noise in every arm, the reference too) lift both
    floors far above float32's precision (~1e-7); the larger governs, as the receipt says."""
    r = only(run_cpu("gradient-compare", {"batch": 1, "seq": 8}, ref=NOISY))
    assert r.outcome == "passed", r.reason
    fams = r.measurements["families"]
    assert all(max(f["noise"], f["err_base"]) > 1e-4 for f in fams)
    for f in fams:
        assert f["floor_from"] == ("repeat-noise" if f["noise"] > f["err_base"] else "precision")
    r = only(
        run_cpu(
            "gradient-compare",
            {"batch": 1, "seq": 8, "candidate_workload_params": {"perturb": 0.5}},
            ref=NOISY,
        )
    )
    assert r.outcome == "failed", r.reason
    assert "beyond err(candidate, ref)" in (r.reason or "")
