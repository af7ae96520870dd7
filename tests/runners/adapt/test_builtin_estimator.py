"""The built-in estimator (issue 51): a ready adapter with no estimator predicts memory
from the built model and a fit measured on the device, an upper envelope that states
its own error and is held to it. Real torch on CPU, tiny models."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from runners.adapt import calibrate
from runners.adapt.library import ModuleAdapter, causal_lm, module
from runners.adapt.model_bytes import model_bytes
from runners.api import run_claim
from runners.contract.result import CheckResult, Json
from runners.protocol import Batch, Shape
from runners.workloads.envelope import VERSION, Point, fit, predict_step, widened

CPU = torch.device("cpu")

TEAM = """
import torch

def build(width):
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, width, 3, padding=1), torch.nn.BatchNorm2d(width), torch.nn.ReLU(),
        torch.nn.Conv2d(width, width, 3, padding=1), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(width, 4),
    )

def loss(model, batch):
    return torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])

def batch(shape, seed):
    # A team's CNN: `seq` is the image side, so a step grows with batch x seq**2.
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(shape.batch, 3, shape.seq, shape.seq, generator=g),
            "y": torch.randint(4, (shape.batch,), generator=g)}

def estimate(params, shape, phase, device_kind, *, cold):
    return 12345 + shape.batch
"""

CNN: dict[str, Json] = {
    "factory": "cnn_team:build",
    "loss": "cnn_team:loss",
    "batch": "cnn_team:batch",
    "factory_params": {"width": 4},
    "calibration": {"max_tokens": 64, "validate_tokens": 128},
}

GPT2: dict[str, Json] = {"n_embd": 16, "n_layer": 1, "n_head": 2, "vocab_size": 64}
GPT2.update(n_positions=64, bos_token_id=0, eos_token_id=0)


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A calibration folder of the test's own, and no calibration kept in memory."""
    monkeypatch.setenv(calibrate.CACHE_VAR, str(tmp_path / "calibration"))
    monkeypatch.setattr(calibrate, "_MEMO", {})
    return tmp_path / "calibration"


@pytest.fixture
def team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "team"
    root.mkdir()
    (root / "cnn_team.py").write_text(TEAM)
    monkeypatch.syspath_prepend(str(root))
    return root


def test_the_fit_is_an_upper_envelope_of_what_it_measured() -> None:
    # A step cost with a constant, a per-token and a quadratic part, and ragged noise.
    noise = [0, 900, -400, 1300, 0, -800, 250]
    shapes = [(1, 8), (1, 16), (1, 32), (2, 8), (2, 16), (2, 32), (4, 16)]
    points = [
        Point(b, s, 5000 + 300 * b * s + 2 * b * s * s + n)
        for (b, s), n in zip(shapes, noise, strict=True)
    ]
    f = fit(("constant", "tokens", "attention"), points)
    assert all(isinstance(v, int) and v >= 0 for v in f.coefficients.values())
    # Noise above the point is stated, not hidden (in bytes, a permille, or both).
    assert f.error_bytes > 0 or f.error_permille > 0
    for p in points:
        assert p.measured_bytes <= predict_step(f, p.batch, p.seq), p
    # Not least squares: the envelope is the point plus the residuals' cover, and
    # exactly that (one byte or one permille less leaves a point above it).
    for tighter in (
        replace(f, error_bytes=f.error_bytes - 1) if f.error_bytes else None,
        replace(f, error_permille=f.error_permille - 1) if f.error_permille else None,
    ):
        if tighter is not None:
            assert any(p.measured_bytes > predict_step(tighter, p.batch, p.seq) for p in points)
    # A validation point above the envelope widens the stated error to cover it.
    big = Point(8, 64, 2 * predict_step(f, 8, 64))
    wider = widened(f, big)
    assert wider.validation[-1]["covered"] is False
    assert predict_step(wider, 8, 64) > predict_step(f, 8, 64)
    assert big.measured_bytes <= predict_step(wider, 8, 64)
    for p in points:
        assert p.measured_bytes <= predict_step(wider, p.batch, p.seq), p


def test_lora_parameters_count_by_trainability_and_dtype() -> None:
    pytest.importorskip("peft")
    w = causal_lm(model_type="gpt2", config=GPT2, lora={"r": 2, "target_modules": ["c_attn"]})
    w.setup(CPU, 0)
    mb = model_bytes(w.model, w.optimizer)
    lora = sum(p.numel() * 4 for n, p in w.model.named_parameters() if "lora_" in n)
    base = sum(p.numel() * 4 for n, p in w.model.named_parameters() if "lora_" not in n)
    assert lora > 0 and base > lora
    assert mb.parameters == {"frozen.float32": base, "trainable.float32": lora}
    assert (mb.trainable_bytes, mb.frozen_bytes, mb.gradient_bytes) == (lora, base, lora)
    n_lora = sum(1 for n, _ in w.model.named_parameters() if "lora_" in n)
    # AdamW: two moments per trainable parameter and a float32 step each.
    assert mb.optimizer_state_bytes == 2 * lora + 4 * n_lora
    w.teardown()


def _measured(w: ModuleAdapter, shape: Shape, grad: bool) -> int:
    from runners.harness.probe import make_probe
    from runners.harness.steps import measure_step

    probe = make_probe(CPU)
    with probe.session():
        w.zero_grad()
        batch = w.make_batch(shape, 0)

        def step() -> object:
            out = w.forward(batch, grad=grad)
            if grad:
                w.backward(out)
            return out

        rec = measure_step(probe, "t", step)
        w.zero_grad()
    probe.close()  # type: ignore[attr-defined]
    return rec.increment_bytes


def test_calibration_lies_under_its_prediction_and_is_kept(team: Path, _cache: Path) -> None:
    w = module(**CNN)
    w.setup(CPU, 0)
    cal = w.calibration()
    assert w.calibration_source == "measured"
    assert cal.measured_up_to_tokens == 128
    for phase, f in cal.phases.items():
        # The gradients a backward allocates are known exactly, not fit.
        assert f.known_bytes == (cal.model.gradient_bytes if phase == "forward_backward" else 0)
        for p in f.points:
            predicted, point, _ = cal.estimate(p.batch, p.seq, phase, cold=False)
            assert p.measured_bytes <= predicted and point <= predicted
        for v in f.validation:
            assert isinstance(v["measured_bytes"], int) and isinstance(v["predicted_bytes"], int)
            # Covered by the stated error, widened where it had to be.
            _, _, terms = cal.estimate(int(v["batch"]), int(v["seq"]), phase, cold=False)
            assert v["measured_bytes"] <= sum(terms.values())
    # The buffers a training-mode step updates (BatchNorm's statistics) are as they were.
    fresh = module(**CNN)
    fresh.setup(CPU, 0)
    for (n, a), (_, b) in zip(w.model.named_buffers(), fresh.model.named_buffers(), strict=True):
        assert torch.equal(a, b), n
    # Held at shapes it never measured, up to the tokens it states.
    for shape in (Shape(batch=3, seq=5), Shape(batch=1, seq=8)):
        for grad, phase in ((False, "forward_nograd"), (True, "forward_backward")):
            est = w.estimate(shape, phase)  # type: ignore[arg-type]
            assert est.calibration == cal.id and est.point_bytes is not None
            assert est.point_bytes <= est.predicted_bytes == sum(est.terms.values())
            assert _measured(w, shape, grad) <= est.predicted_bytes, (shape, phase)
    # Kept by digest and device: a second run reads it, measuring nothing.
    [kept] = list(_cache.iterdir())
    calibrate._MEMO.clear()
    again = module(**CNN)
    again.setup(CPU, 0)
    assert again.calibration().id == cal.id and again.calibration_source == "cache"
    # A record of another device under the same name is never reused: measured again.
    doc = json.loads(kept.read_text())
    kept.write_text(json.dumps({**doc, "device": "cuda NVIDIA H200 150754820096 sm90"}))
    calibrate._MEMO.clear()
    again.calibration()
    assert again.calibration_source == "measured"
    # Nor one of an earlier method (2: a relative error alone; 3: columns unscaled):
    # measured again, as this one.
    for earlier in ("2", "3"):
        kept.write_text(json.dumps({**doc, "version": earlier}))
        calibrate._MEMO.clear()
        assert again.calibration().version == VERSION == "5"
        assert again.calibration_source == "measured"


def test_a_teams_own_estimator_is_used_as_before(team: Path) -> None:
    w = module(**{**CNN, "estimator": "cnn_team:estimate"})
    w.setup(CPU, 0)
    assert not w.builtin_estimator
    est = w.estimate(Shape(batch=2, seq=4), "forward_backward")
    assert est.predicted_bytes == 12347 and est.calibration is None
    assert w.calibration_source is None


def _admission(
    team: Path, params: dict[str, Json], check: str = "admission", given: Json = None
) -> CheckResult:
    [r] = run_claim(
        claim=f"{check}.x",
        check=check,
        params={"batches": [1, 2], "seqs": [4, 8], "warm_runs": 1} if given is None else given,  # type: ignore[arg-type]
        repo_root=team,
        workload_ref="runners.adapt.library:module",
        workload_params=params,
        device="cpu",
        observer_off_required=False,
        base_root=None,
        progress=lambda _m: None,
    )
    return r


def test_admission_with_no_estimator_is_judged_on_the_builtin_one(team: Path) -> None:
    r = _admission(team, CNN)
    assert r.outcome == "passed", r.reason
    m = r.measurements
    assert m["counterexample_count"] == 0 and isinstance(m["admitted_count"], int)
    rows = [x for x in m["shapes"] if isinstance(x, dict)]  # type: ignore[union-attr]
    admitted = [x for x in rows if x["admitted"]]
    assert admitted and len(admitted) < len(rows)  # the budget refuses some
    cals = {x["calibration"] for x in rows}
    assert len(cals) == 1 and str(cals.pop()).startswith("sha256:")
    for x in rows:
        assert isinstance(x["point_bytes"], int) and isinstance(x["predicted_bytes"], int)
        assert 0 < x["point_bytes"] <= x["predicted_bytes"]
    for x in admitted:
        assert isinstance(x["measured_bytes"], int) and isinstance(x["predicted_bytes"], int)
        assert x["measured_bytes"] <= x["predicted_bytes"]


def test_an_admitted_step_with_no_ratio_is_inconclusive() -> None:
    from runners.checks.admission import Params, _verdict

    row: dict[str, Json] = {
        "phase": "forward_nograd",
        "shape": "1x4",
        "run": "first",
        "admitted": True,
        "predicted_bytes": 0,
        "measured_bytes": 0,
        "measured_over_predicted": None,
    }
    v = _verdict(Params(), [row], [], [], {})
    assert v.outcome == "inconclusive"
    assert v.reason is not None and "no measured/predicted ratio" in v.reason
    assert "forward_nograd at shape 1x4 (first)" in v.reason
    # Bounded or not: the tightness a plan asks for cannot be judged without a ratio.
    v = _verdict(Params(min_measured_over_predicted=0.5), [dict(row)], [], [], {})
    assert v.outcome == "inconclusive"


QWEN_MOE: dict[str, Json] = {
    "vocab_size": 128,
    "hidden_size": 32,
    "intermediate_size": 64,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "tie_word_embeddings": False,
}


def test_a_moe_under_skewed_routing_stays_under_its_prediction() -> None:
    pytest.importorskip("transformers")
    from runners.adapt.held import modules_held
    from runners.adapt.routers import RouterHooks, find_routers
    from runners.harness.probe import make_probe
    from runners.harness.steps import measure_step

    w = causal_lm(
        model_type="qwen3_moe", config=QWEN_MOE, attention="eager", calibration={"max_tokens": 32}
    )
    w.setup(CPU, 0)
    cal = w.calibration()
    # Calibrated under the worst routing the routers allow, and the record says so.
    assert cal.routing["routers"] == 1 and cal.routing["forced"] is True
    assert set(cal.routing["share_permille"]) == {"forward_nograd", "forward_backward"}
    # Every token to the last two experts (not those calibration forced): a skew the
    # router replay of the harness puts on the model's own router.
    hooks = RouterHooks(find_routers(modules_held(w)))
    probe = make_probe(CPU)
    try:
        with probe.session():
            for shape in (Shape(batch=3, seq=7), Shape(batch=1, seq=24)):
                skew = torch.tensor([2, 3]).expand(shape.tokens, 2)
                for grad, phase in ((False, "forward_nograd"), (True, "forward_backward")):
                    for given in (None, skew):
                        hooks.replay(None if given is None else dict.fromkeys(hooks.routers, given))
                        w.zero_grad()
                        batch = w.make_batch(shape, 0)

                        def step(batch: Batch = batch, grad: bool = grad) -> object:
                            out = w.forward(batch, grad=grad)
                            if grad:
                                w.backward(out)
                            return out

                        rec = measure_step(probe, "skewed", step)
                        w.zero_grad()
                        assert given is None or hooks.replayed > 0  # the skew was taken
                        est = w.estimate(shape, phase)  # type: ignore[arg-type]
                        assert rec.increment_bytes <= est.predicted_bytes, (shape, phase, given)
    finally:
        hooks.detach()
        probe.close()  # type: ignore[attr-defined]


def test_doctor_names_the_estimator_each_claim_will_use(team: Path) -> None:
    from ledger.conformance.plan_level import judge_from_plan
    from runners.doctor.claims import judge
    from runners.doctor.probe import BUILTIN_ESTIMATOR, probe

    ref = "runners.adapt.library:module"
    caps = probe(team, ref, CNN)["capabilities"]
    assert caps["estimate"] == {"state": "fallback", "detail": BUILTIN_ESTIMATOR, "add": ""}
    line = judge("admission.x", "admission", {}, caps).line()
    assert line == f"admission.x: judged through a fallback (estimate: {BUILTIN_ESTIMATOR})"
    # A team's own estimator is probed and used as it was: judged, no fallback.
    own = probe(team, ref, {**CNN, "estimator": "cnn_team:estimate"})["capabilities"]
    assert own["estimate"]["state"] == "native"
    assert judge("admission.x", "admission", {}, own).line() == "admission.x: judged"
    # From the plan alone (what qualify says before the first claim).
    claims = [
        {"claim": "adm", "check": "admission", "params": {}, "workload": ref, "workload_params": p}
        for p in (CNN, {**CNN, "estimator": "builtin"}, {**CNN, "estimator": "cnn_team:estimate"})
    ]
    report = judge_from_plan(claims)
    assert [r["judgement"] for r in report["claims"]] == ["fallback", "fallback", "judged"]
    assert report["lines"][0].startswith(
        "adm: can be judged through a fallback (estimate: the built-in estimator"
    )
    assert "3 can be judged (2 on the built-in estimator), 0 cannot" in report["summary"]


def test_the_calibration_is_a_receipt_that_admission_rows_name(team: Path) -> None:
    from runners.workloads.calibration_record import Calibration

    r = _admission(team, CNN, "estimator-calibration", {})
    assert r.outcome == "passed", r.reason
    m = r.measurements
    assert m["calibration_source"] == "measured"
    record = m["record"]
    assert isinstance(record, dict)
    cal = Calibration.from_json(record)
    # The record is the fit itself: its id recomputed from what the receipt holds.
    assert cal.id == m["calibration"] and cal.workload_digest == r.scope["workload_digest"]
    assert cal.device == "cpu" and cal.measured_up_to_tokens == m["measured_up_to_tokens"]
    # The stated error's two parts, per phase, as the record has them (exact integers).
    assert m["error_bytes"] == {k: f.error_bytes for k, f in sorted(cal.phases.items())}
    assert m["error_permille"] == {k: f.error_permille for k, f in sorted(cal.phases.items())}
    # Admission in a later claim uses the kept calibration and names it on every row.
    adm = _admission(team, CNN)
    rows = [x for x in adm.measurements["shapes"] if isinstance(x, dict)]  # type: ignore[union-attr]
    assert {x["calibration"] for x in rows} == {m["calibration"]}
    # A team's own estimator has nothing to calibrate: inconclusive, and says why.
    own = _admission(team, {**CNN, "estimator": "cnn_team:estimate"}, "estimator-calibration", {})
    assert own.outcome == "inconclusive"
    assert own.reason is not None and "estimator of its own" in own.reason
