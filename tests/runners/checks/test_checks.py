"""Every check on CPU with the (tiny) reference workload and the broken variants."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from benchmarks.whole_plan import attempts
from runners.api import run_claim
from runners.contract.result import CheckResult
from tests.runners.conftest import MOE, REPO, TINY, Recorder, RunClaim

LATTICE = {"batches": [1, 2], "seqs": [8, 16]}


def only(results: list[CheckResult]) -> CheckResult:
    assert len(results) == 1
    return results[0]


def assert_exact_ints(r: CheckResult) -> None:
    for k, v in r.measurements.items():
        if k.endswith(("_bytes", "_ns")):
            assert v is None or (isinstance(v, int) and not isinstance(v, bool)), (k, v)


def test_admission_passes_with_refusals_and_over_refusal_measured(run_cpu: RunClaim) -> None:
    r = only(run_cpu("admission", LATTICE))
    assert r.outcome == "passed", r.reason
    m = r.measurements
    assert m["memory_simulated"] is True and m["budget_rule"].startswith("live after setup")
    assert m["admitted_count"] > 0 and m["refused_count"] > 0
    assert m["counterexample_count"] == 0
    rows = m["shapes"]
    assert isinstance(rows, list)
    admitted = [x for x in rows if isinstance(x, dict) and x["admitted"]]
    refused = [x for x in rows if isinstance(x, dict) and not x["admitted"]]
    for x in admitted:
        assert x["status"] == "ok" and x["measured_bytes"] <= x["predicted_bytes"]
        # Edge pressure: ballast brought usable memory down to the prediction.
        assert x["usable_bytes"] - x["predicted_bytes"] <= m["edge_margin_bytes"]
        # The attempt's own time holds the measured step and the edge search, apart.
        attempt, step, edge = x["attempt_ns"], x["duration_ns"], x["edge_ns"]
        assert all(type(v) is int and v > 0 for v in (attempt, step, edge)), x
        assert attempt >= step + edge, x
    # benchmarks/whole_plan's split of the same rows adds up to the attempts' whole.
    split = attempts(rows)
    parts = [v for k, v in split.items() if not k.endswith(" whole")]
    assert len(parts) == 3 and min(parts) >= 0
    whole = next(v for k, v in split.items() if k.endswith(" whole"))
    assert abs(sum(parts) - whole) < 1e-6
    assert whole == sum(x["attempt_ns"] for x in rows) / 1e9  # refused ones too
    assert any(x["ballast_bytes"] > 0 for x in admitted)
    assert {x["run"] for x in admitted} == {"first", "repeat1"}
    assert [x["first_in_process"] for x in rows] == [True] + [False] * (len(rows) - 1)
    # Cold as the estimate was told it: the first run of each phase in the process.
    firsts = {x["phase"]: i for i, x in reversed(list(enumerate(rows)))}
    assert [i for i, x in enumerate(rows) if x["cold"]] == sorted(firsts.values())
    for x in refused:
        assert x["predicted_bytes"] > x["usable_bytes"] and x["suggestion"]
        assert x["over_refused"] in (True, False)
        assert x["over_refused"] == (x["measured_bytes"] <= x["usable_bytes"])
    assert r.cleanup.complete
    kinds = {res.kind for res in r.cleanup.resources}
    assert "ballast" in kinds and "host-memory" in kinds
    assert r.scope["workload"] == "moe-lora" and r.scope["dtype"] == "float32"
    assert len(str(r.scope["workload_digest"])) == 64
    assert r.params["determinism"]["deterministic_algorithms"] is True  # type: ignore[index]
    assert_exact_ints(r)


def test_admission_reports_the_under_predictor_counterexample(run_cpu: RunClaim) -> None:
    r = only(
        run_cpu(
            "admission",
            {"batches": [2], "seqs": [16], "phases": ["forward_backward"], "warm_runs": 0},
            ref="runners.workloads.broken:under_predicting",
        )
    )
    assert r.outcome == "failed"
    assert r.reason is not None and "counterexample" in r.reason and "2x16" in r.reason
    (row,) = r.measurements["shapes"]  # type: ignore[misc]
    assert row["counterexample"] is True and row["shape"] == "2x16"
    assert row["measured_bytes"] > row["predicted_bytes"]


def test_admission_every_shape_refused_is_refused(run_cpu: RunClaim) -> None:
    r = only(
        run_cpu(
            "admission",
            {"batches": [1], "seqs": [8], "budget_bytes": 1, "measure_refused": False},
        )
    )
    assert r.outcome == "refused"
    assert r.reason is not None and "every one of 2" in r.reason
    assert r.measurements["admitted_count"] == 0


def test_regression_24view_passes_on_the_reference(run_cpu: RunClaim) -> None:
    r = only(run_cpu("regression-24view", {"seq": 8}))
    assert r.outcome == "passed", r.reason
    m = r.measurements
    assert m["views"] == 24 and m["pooled_max_abs_diff"] == 0.0
    assert m["pooled_sha256_run1"] == m["pooled_sha256_run2"]
    assert isinstance(m["nll_rel_diff"], float) and m["nll_rel_diff"] <= 1e-5
    assert m["forward1_cold_increment_bytes"] == m["forward2_warm_increment_bytes"]
    assert_exact_ints(r)
    # The chunked NLL judged against a float64 run of the same model.
    assert m["rule"] == "reference" and m["reference_dtype"] == "float64"
    assert 0 < m["nll_err_unchunked"] < 1e-6 and m["nll_floor_from"] == "precision"  # type: ignore[operator]
    assert m["nll_err_chunked"] <= 2 * m["nll_err_unchunked"] + 1e-6  # type: ignore[operator]
    errs = {o["name"]: o["err_base"] for o in m["outputs_against_reference"]}  # type: ignore[union-attr,index]
    assert set(errs) == {"loss", "pooled_hidden"} and all(0 < e < 1e-5 for e in errs.values())
    routed = m["routing"]["base_vs_reference"]  # type: ignore[index,call-overload]
    assert routed["selections"] == 24 * 8 and routed["selections_differing"] == 0


def test_regression_24view_threshold_rule_as_before(run_cpu: RunClaim) -> None:
    r = only(run_cpu("regression-24view", {"seq": 8, "rule": "threshold"}))
    assert r.outcome == "passed", r.reason
    m = r.measurements
    assert m["rule"] == "threshold" and "reference_dtype" not in m
    assert m["families"][0]["noise_floor"] == 0.0  # type: ignore[index]


def test_regression_24view_fails_on_nondeterministic_outputs(run_cpu: RunClaim) -> None:
    r = only(
        run_cpu("regression-24view", {"seq": 8}, ref="runners.workloads.broken:nondeterministic")
    )
    assert r.outcome == "failed"
    assert r.reason is not None and "did not repeat" in r.reason
    assert r.measurements["pooled_sha256_run1"] != r.measurements["pooled_sha256_run2"]


def test_raising_in_forward_is_an_outcome(run_cpu: RunClaim) -> None:
    r = only(
        run_cpu("regression-24view", {"seq": 8}, ref="runners.workloads.broken:raises_in_forward")
    )
    assert r.outcome == "failed"
    assert r.reason is not None and "RuntimeError" in r.reason and "deliberate" in r.reason
    assert r.cleanup.complete
    a = only(
        run_cpu(
            "admission",
            {"batches": [1], "seqs": [8], "phases": ["forward_nograd"]},
            ref="runners.workloads.broken:raises_in_forward",
        )
    )
    assert a.outcome == "failed" and "RuntimeError" in (a.reason or "")


def test_full_prefix_backward(run_cpu: RunClaim) -> None:
    r = only(run_cpu("full-prefix-backward", {"batch": 2, "seq": 16, "prefix_backwards": 2}))
    assert r.outcome == "passed", r.reason
    m = r.measurements
    assert m["target_admitted"] is True
    assert 0 < m["target_measured_bytes"] <= m["target_predicted_bytes"]  # type: ignore[operator]
    assert m["prefix2_status"] == "ok" and m["optimizer_step_status"] == "ok"
    assert isinstance(m["optimizer_step_increment_bytes"], int)
    assert m["optimizer_step_increment_bytes"] > 0  # AdamW state appears on the first step
    assert_exact_ints(r)
    refused = only(
        run_cpu(
            "full-prefix-backward",
            {"batch": 2, "seq": 16, "prefix_backwards": 1, "budget_bytes": 200_000},
        )
    )
    assert refused.outcome == "refused" and "predicted" in (refused.reason or "")


def test_gradient_compare_passes_for_identical_arms(run_cpu: RunClaim) -> None:
    r = only(run_cpu("gradient-compare", {"batch": 1, "seq": 8}))
    assert r.outcome == "passed", r.reason
    m = r.measurements
    assert r.params["rule"] == "reference" and m["rule"] == "reference"
    assert m["tensors_compared"] == 16 and m["tensors_beyond_rule"] == 0
    assert m["max_rel_l2"] == 0.0
    assert m["base_gpu_uuid"] == m["candidate_gpu_uuid"] == m["reference_gpu_uuid"] == "cpu"
    assert len({m["base_pid"], m["candidate_pid"], m["reference_pid"]}) == 3
    assert r.cleanup.complete
    kinds = [res.kind for res in r.cleanup.resources]
    # base, candidate, both again in float64 (the references) and the base's repeat; the
    # candidate's float64 arm stops at once for a float32 workload (function part skipped)
    assert kinds.count("process") == 5 and kinds.count("process-group") == 5
    assert m["candidate_reference_status"] == "skipped" and "function_atol" not in m
    assert m["reference_dtype"] == "float64" and m["max_noise_rel_l2"] == 0.0
    fams = m["families"]
    assert isinstance(fams, list) and {f["state"] for f in fams} == {"passed"}  # type: ignore[index]
    # The precision floor is real (float32 against float64), the noise floor zero.
    assert all(0 < f["err_base"] < 1e-5 and f["floor_from"] == "precision" for f in fams)  # type: ignore[index,operator]
    assert all(f["err_candidate"] == f["err_base"] for f in fams)  # type: ignore[index]
    assert all(f["err_function"] is None for f in fams)  # type: ignore[index]
    r = only(run_cpu("gradient-compare", {"batch": 1, "seq": 8, "reference_candidate": True}))
    assert r.outcome == "passed", r.reason
    m = r.measurements
    assert m["function_atol"] == 1024 * 2.0**-53 and m["function_scale"] == 2.0**-29
    assert all(f["err_function"] == 0.0 for f in m["families"])  # type: ignore[index,union-attr]
    routed = m["routing"]["candidate_vs_base"]  # type: ignore[index,call-overload]
    assert routed["selections_differing"] == 0 and routed["selections"] == 8  # 8 tokens, 1 layer


def test_gradient_compare_fails_for_a_perturbed_candidate(run_cpu: RunClaim) -> None:
    r = only(
        run_cpu(
            "gradient-compare",
            {"batch": 1, "seq": 8, "candidate_workload_params": {"perturb": 0.5}},
        )
    )
    assert r.outcome == "failed"
    assert r.reason is not None and "beyond err(candidate, ref) <= 2.0 x floor" in r.reason
    assert r.measurements["tensors_beyond_rule"] > 0  # type: ignore[operator]
    failed = r.measurements["failed_tensors"]
    assert isinstance(failed, list) and str(failed[0]) in r.reason
    rows = r.measurements["tensors"]
    assert isinstance(rows, list) and all(isinstance(x, dict) and "cosine" in x for x in rows)


def test_gradient_compare_threshold_rule_as_before(run_cpu: RunClaim) -> None:
    r = only(
        run_cpu(
            "gradient-compare",
            {
                "batch": 1,
                "seq": 8,
                "rule": "threshold",
                "candidate_workload_params": {"perturb": 0.5},
            },
        )
    )
    assert r.outcome == "failed"
    assert r.reason is not None and "over rel-L2 0.0001" in r.reason
    m = r.measurements
    assert m["rule"] == "threshold" and m["threshold"] == 1e-4  # the fp32 default
    assert m["tensors_over_threshold"] > 0 and "reference_pid" not in m  # type: ignore[operator]


def test_observer_off_control_pairs_runs(run_cpu: RunClaim, artifact_dir: Path) -> None:
    results = run_cpu(
        "admission",
        {"batches": [1], "seqs": [8], "observer": "on", "warm_runs": 0},
        observer_off_required=True,
    )
    on, off, control = results
    assert (on.observer, off.observer, control.observer) == ("on", "off", "off")
    assert (on.check, off.check, control.check) == (
        "admission",
        "admission",
        "observer-off-control",
    )
    assert control.outcome == "passed", control.reason
    assert control.measurements["observer_changed_anything"] is False
    assert control.measurements["compared_keys"] > 0  # type: ignore[operator]
    assert control.params["check"] == "admission"
    (art,) = on.artifacts
    assert Path(art.path).exists() and art.media_type == "application/json"
    assert Path(art.path).parent == artifact_dir
    assert not off.artifacts
    assert on.measurements["observer_saved_tensors"] > 0  # type: ignore[operator]
    assert "observer_saved_tensors" not in off.measurements


def test_observer_off_control_fails_when_outputs_change(run_cpu: RunClaim) -> None:
    results = run_cpu(
        "observer-off-control",
        {"check": "regression-24view", "params": {"seq": 8, "views": 2}},
        ref="runners.workloads.broken:nondeterministic",
    )
    control = results[-1]
    assert control.outcome == "failed" and "the observer changed" in (control.reason or "")
    keys = {d["key"] for d in control.measurements["differences"]}  # type: ignore[index, union-attr]
    assert "pooled_sha256_run1" in keys


def test_cleanup_passes_on_the_reference(run_cpu: RunClaim) -> None:
    r = only(run_cpu("cleanup"))
    assert r.outcome == "passed", r.reason
    assert r.cleanup.complete and r.measurements["resources_released"] == len(r.cleanup.resources)


def test_cleanup_names_a_leaked_process(run_cpu: RunClaim, recorder: Recorder) -> None:
    r = only(
        run_cpu(
            "cleanup",
            ref=recorder.ref(),
            root=recorder.root,
            workload_params={"kind": "leaks_process"},
        )
    )
    (w,) = recorder.instances()
    pid = w.leaked_pid
    assert isinstance(pid, int)
    assert r.outcome == "failed" and not r.cleanup.complete
    assert r.reason is not None and f"process {pid}" in r.reason
    leak = next(x for x in r.cleanup.resources if x.kind == "process" and x.id == str(pid))
    assert not leak.released and "LEAK" in leak.proof
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_cleanup_names_a_leaked_tempdir(run_cpu: RunClaim, recorder: Recorder) -> None:
    r = only(
        run_cpu(
            "cleanup",
            ref=recorder.ref(),
            root=recorder.root,
            workload_params={"kind": "leaks_tempdir"},
        )
    )
    (w,) = recorder.instances()
    path = w.leaked_path
    assert r.outcome == "failed" and not r.cleanup.complete
    assert r.reason is not None and path in r.reason
    assert any(x.id == path and not x.released for x in r.cleanup.resources)
    assert not os.path.exists(path)


def test_keyboard_interrupt_releases_then_reraises(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    root.mkdir()
    (root / "interrupting.py").write_text(
        "from runners.workloads import broken\n"
        "INSTANCES = []\n"
        "class W(broken.LeaksProcess):\n"
        "    def forward(self, batch, *, grad):\n"
        "        raise KeyboardInterrupt\n"
        "def make(**p):\n"
        "    w = W(broken.MoEConfig(**p))\n"
        "    INSTANCES.append(w)\n"
        "    return w\n"
    )
    real_tmp = tempfile.gettempdir()
    with pytest.raises(KeyboardInterrupt):
        run_claim(
            claim="c",
            check="cleanup",
            params={},
            repo_root=root,
            workload_ref="interrupting:make",
            workload_params=TINY,
            device="cpu",
            observer_off_required=False,
            base_root=None,
            progress=lambda _m: None,
            artifact_dir=tmp_path / "a",
        )
    import sys

    (w,) = sys.modules["interrupting"].INSTANCES
    with pytest.raises(ProcessLookupError):
        os.kill(w.leaked_pid, 0)
    assert tempfile.gettempdir() == real_tmp


def test_mesh_handoff_gloo_functional_run_on_cpu(run_cpu: RunClaim) -> None:
    r = only(run_cpu("mesh-handoff", {"rows": 64, "cols": 16, "dtype": "float32"}))
    assert r.outcome == "inconclusive"
    assert r.reason is not None and "device_kind=cpu" in r.reason
    assert r.scope["device_kind"] == "cpu" and r.scope["backend"] == "gloo"
    assert r.measurements["rank0_gather_matches"] is True
    assert r.measurements["rank1_gather_matches"] is True
    assert r.cleanup.complete


def test_results_serialise_to_json(run_cpu: RunClaim) -> None:
    import dataclasses

    r = only(run_cpu("cleanup"))
    json.dumps(dataclasses.asdict(r), allow_nan=False)


def test_workload_load_failure_fails_the_claim(run_cpu: RunClaim) -> None:
    # The pull request's own code did not load: its failure, never the host's.
    r = only(run_cpu("cleanup", ref="no_such_module_xyz:make"))
    assert r.outcome == "failed" and "no_such_module_xyz" in (r.reason or "")


def test_bad_parameter_is_inconclusive(run_cpu: RunClaim) -> None:
    # The plan's parameter, not the code: nothing found either way.
    r = only(run_cpu("admission", {"batches": "many"}))
    assert r.outcome == "inconclusive" and "batches" in (r.reason or "")


_ = (MOE, REPO)


def test_gradient_compare_without_a_dtype_keyword_keeps_its_reference_arm(
    run_cpu: RunClaim, tmp_path: Path
) -> None:
    """A workload whose setup takes no dtype (written for an earlier protocol) still
    gets its reference arm: the modules it trains are upcast, and the receipt names
    that route (tests/examples/test_frozen_protocol.py has the case where nothing can
    be upcast, inconclusive with the line to add)."""
    root = tmp_path / "checkout"
    root.mkdir()
    (root / "fixed_dtype.py").write_text(
        "from runners.workloads.moe import MoEConfig, MoEWorkload\n\n\n"
        "class FixedDtype(MoEWorkload):\n"
        "    def setup(self, device, seed):\n"
        "        super().setup(device, seed)\n\n\n"
        "def make(**params):\n"
        "    return FixedDtype(MoEConfig(**params))\n"
    )
    r = only(run_cpu("gradient-compare", {"batch": 1, "seq": 8}, ref="fixed_dtype:make", root=root))
    assert r.outcome == "passed", r.reason
    routes = {k: v for k, v in r.measurements.items() if k.endswith("_precision_route")}
    assert "upcast-modules" in routes.values(), routes
    r = only(
        run_cpu(
            "gradient-compare",
            {"batch": 1, "seq": 8, "rule": "threshold"},
            ref="fixed_dtype:make",
            root=root,
        )
    )
    assert r.outcome == "passed", r.reason
