"""A harness that cannot compute never accuses the code (issue 42, item 4).

Where the reference precision, the baseline arm or the harness itself cannot run,
only the judgements that need it are inconclusive, saying why and what would fix
it; failures found without it (outputs that do not repeat, an exception in the
code's own step) stand. Before giving up, the reference takes an equivalent path
the library offers (transformers' MoE experts: the ``eager`` loop where a fused
kernel has no kernel for the reference dtype) and the receipt says so.

The cases: transformers' Qwen3-MoE with PEFT LoRA, experts on ``torch._grouped_mm``
(no float64 kernel), in float32 on CPU through the ready adapter; a plain module
whose batches have no ``input_ids``; a workload whose reference cannot compute by
any path."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from runners.api import run_claim
from runners.checks.grad_arm import run_arm
from runners.contract.result import CheckResult, Json
from runners.doctor.claims import judge
from runners.doctor.probe import probe
from tests.runners.conftest import REPO, TINY

QWEN: dict[str, Json] = {
    "model_type": "qwen3_moe",
    "dtype": "float32",
    "attention": "eager",
    "experts": "grouped_mm",
    "config": {
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
    },
    "lora": {
        "r": 4,
        "lora_alpha": 8,
        "target_modules": ["q_proj", "v_proj"],
        "target_parameters": ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"],
    },
}
"""A tiny Qwen3-MoE + LoRA in float32 on grouped_mm (built from the config: no download)."""

ADAPTER = "runners.adapt.library:causal_lm"

TOY = """
import torch


class Net(torch.nn.Module):
    def __init__(self, vocab, width, act):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, width)
        self.act = {"gelu": torch.nn.GELU, "relu": torch.nn.ReLU}[act]()
        self.out = torch.nn.Linear(width, vocab)

    def forward(self, ids):
        return self.out(self.act(self.emb(ids)))


def build(vocab=64, width=16):
    return Net(vocab, width, ACT)


def loss(model, batch):
    logits = model(batch["ids"])
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())


def batch(shape, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(64, (shape.batch, shape.seq), generator=g)
    return {"ids": ids, "labels": ids.roll(-1, 1)}
"""
"""A plain module with the documented ``batch(shape, seed)``, its keys its own."""

MODULE: dict[str, Json] = {
    "factory": "toy:build",
    "loss": "toy:loss",
    "batch": "toy:batch",
    "dtype": "float32",
}

NO_FLOAT64 = """
import torch

from runners.workloads.broken import Nondeterministic
from runners.workloads.moe import MoEConfig, MoEWorkload


class NoFloat64(MoEWorkload):
    \"\"\"The reference workload on a kernel that has no float64 (as grouped_mm); with
    ``own_step_raises`` its own float32 step raises too.\"\"\"

    def __init__(self, config, own_step_raises):
        super().__init__(config)
        self.own_step_raises = own_step_raises

    def forward(self, batch, *, grad):
        if self.own_step_raises:
            raise RuntimeError("a real bug in the code's own step")
        if any(p.dtype == torch.float64 for p in self._model().parameters()):
            raise RuntimeError("expected a Float32 or BFloat16 matrix, got Double")
        return super().forward(batch, grad=grad)


class NoisyNoFloat64(NoFloat64, Nondeterministic):
    pass


def make(noisy=False, own_step_raises=False, **params):
    cls = NoisyNoFloat64 if noisy else NoFloat64
    return cls(MoEConfig(**params), own_step_raises)
"""


class Runner:
    """`run_claim` on CPU with the workload parameters as given (the conftest's runner
    adds the reference workload's)."""

    def __init__(self, artifact_dir: Path) -> None:
        self.artifact_dir = artifact_dir

    def __call__(
        self,
        check: str,
        params: dict[str, Json],
        *,
        ref: str,
        workload_params: dict[str, Json],
        root: Path = REPO,
        base_root: Path | None = None,
    ) -> list[CheckResult]:
        return run_claim(
            claim=f"test.{check}",
            check=check,
            params=params,
            repo_root=root,
            workload_ref=ref,
            workload_params=workload_params,
            device="cpu",
            observer_off_required=False,
            base_root=base_root,
            progress=lambda _m: None,
            artifact_dir=self.artifact_dir,
        )


@pytest.fixture
def run_cpu(artifact_dir: Path) -> Runner:
    return Runner(artifact_dir)


def only(results: list[CheckResult]) -> CheckResult:
    assert len(results) == 1
    return results[0]


def toy_tree(path: Path, act: str) -> Path:
    path.mkdir()
    (path / "toy.py").write_text(TOY.replace("ACT", repr(act)))
    return path


@pytest.fixture
def no_float64(tmp_path: Path) -> Path:
    root = tmp_path / "nofloat64"
    root.mkdir()
    (root / "nofloat64.py").write_text(textwrap.dedent(NO_FLOAT64))
    return root


def _qwen() -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("peft")


def test_grouped_mm_in_float32_regression_computes_its_reference_through_eager_experts(
    run_cpu: Runner,
) -> None:
    _qwen()
    r = only(
        run_cpu("regression-24view", {"views": 4, "seq": 8}, ref=ADAPTER, workload_params=QWEN)
    )
    assert r.outcome == "passed", r.reason
    m = r.measurements
    assert m["reference_dtype"] == "float64" and m["precision_route"] == "upcast-modules"
    # Which path computed the reference, and why not the workload's own.
    equivalent = m["precision_route_equivalent"]
    assert isinstance(equivalent, dict)
    assert equivalent["path"] == "experts_implementation=eager"
    assert equivalent["instead_of"] == "grouped_mm"
    assert "Double" in str(equivalent["because"])
    errs = {o["name"]: o["err_base"] for o in m["outputs_against_reference"]}  # type: ignore[union-attr,index]
    # The logits in float64 against float32's; transformers reduces the loss in float32.
    assert set(errs) == {"loss", "logits"} and 0 < errs["logits"] < 1e-5, errs  # type: ignore[operator]


def test_grouped_mm_in_float32_observer_off_control_runs_are_never_failed(
    run_cpu: Runner,
) -> None:
    _qwen()
    inner: dict[str, Json] = {"views": 4, "seq": 8}
    on, off, control = run_cpu(
        "observer-off-control",
        {"check": "regression-24view", "params": inner},
        ref=ADAPTER,
        workload_params=QWEN,
    )
    assert (on.outcome, off.outcome, control.outcome) == ("passed", "passed", "passed"), (
        on.reason,
        off.reason,
        control.reason,
    )


def test_grouped_mm_in_float32_the_reference_arm_steps_on_eager_experts(tmp_path: Path) -> None:
    """The gradient arm in this process (`grad_arm.run_arm`, what its child runs)."""
    _qwen()
    spec: dict[str, Json] = {
        "arm": "reference",
        "root": str(REPO),
        "ref": ADAPTER,
        "params": QWEN,
        "device": "cpu",
        "seed": 0,
        "warn_only": False,
        "batch": 1,
        "seq": 8,
        "out_dir": str(tmp_path),
        "reference": True,
        "reference_dtype": None,
    }
    info = run_arm(spec)
    assert info["status"] == "ok", info.get("error")
    assert info["dtype"] == "float64" and info["precision_route"] == "upcast-modules"
    assert info["precision_route_equivalent"]["path"] == "experts_implementation=eager"
    assert "Double" in info["precision_route_equivalent"]["because"]
    assert info["precision_route_seen"]["gradients"] == ["float64"]
    grads = torch.load(tmp_path / "grads.pt", weights_only=True)
    assert any("experts" in n for n in grads) and all(g.isfinite().all() for g in grads.values())
    # The arms under test keep the workload's kernels.
    (tmp_path / "base").mkdir()
    base = run_arm({**spec, "arm": "base", "reference": False, "out_dir": str(tmp_path / "base")})
    assert base["status"] == "ok" and "precision_route_equivalent" not in base


@pytest.mark.slow
def test_grouped_mm_in_float32_gradient_compare_judges_against_the_eager_reference(
    run_cpu: Runner,
) -> None:
    _qwen()
    params: dict[str, Json] = {"batch": 1, "seq": 8, "noise_floor": False}
    r = only(run_cpu("gradient-compare", params, ref=ADAPTER, workload_params=QWEN))
    assert r.outcome == "passed", r.reason
    m = r.measurements
    equivalent = m["reference_precision_route_equivalent"]
    assert isinstance(equivalent, dict)
    assert equivalent["path"] == "experts_implementation=eager"
    assert equivalent["instead_of"] == "grouped_mm"
    # Only the reference arm changed its path: the arms under test ran on grouped_mm.
    assert "base_precision_route_equivalent" not in m
    assert "candidate_precision_route_equivalent" not in m


def test_the_doctor_names_the_equivalent_path_before_any_gpu_time() -> None:
    _qwen()
    caps = probe(REPO, ADAPTER, QWEN)["capabilities"]
    assert caps["precision"]["state"] == "fallback", caps["precision"]
    assert "experts_implementation=eager instead of grouped_mm" in caps["precision"]["detail"]
    r = judge("numerics.gradient-compare", "gradient-compare", {}, caps)
    assert r.judgement == "fallback", r.line()
    assert any("experts_implementation=eager" in f for f in r.fallbacks)


def test_the_doctor_says_which_claims_no_path_can_judge_and_what_would_fix_it(
    no_float64: Path,
) -> None:
    caps = probe(no_float64, "nofloat64:make", TINY)["capabilities"]
    assert caps["precision"]["state"] == "broken"
    assert "in float64" in caps["precision"]["detail"] and "Double" in caps["precision"]["detail"]
    grad = judge("numerics.gradient-compare", "gradient-compare", {}, caps)
    assert grad.judgement == "inconclusive"
    assert 'rule = "threshold"' in grad.line()
    # The regression judges its chunked NLL against the reference: that part only.
    assert judge("r", "regression-24view", {}, caps).judgement == "inconclusive"
    assert judge("r", "regression-24view", {"rule": "threshold"}, caps).judgement == "judged"


def test_a_plain_module_without_input_ids_is_judged_on_its_own_shape(
    run_cpu: Runner, tmp_path: Path
) -> None:
    gelu = toy_tree(tmp_path / "gelu", "gelu")
    params: dict[str, Json] = {"views": 4, "seq": 8}
    r = only(
        run_cpu(
            "regression-24view",
            params,
            ref="runners.adapt.library:module",
            workload_params=MODULE,
            root=gelu,
        )
    )
    assert r.outcome == "passed", r.reason
    # The reference ran, on the batch of the workload's own Shape.
    assert [o["name"] for o in r.measurements["outputs_against_reference"]] == ["loss"]  # type: ignore[union-attr,index]


@pytest.mark.slow
def test_a_real_change_in_a_plain_module_still_fails_gradient_compare(
    run_cpu: Runner, tmp_path: Path
) -> None:
    gelu, relu = toy_tree(tmp_path / "gelu", "gelu"), toy_tree(tmp_path / "relu", "relu")
    params: dict[str, Json] = {"batch": 2, "seq": 8, "noise_floor": False}
    r = only(
        run_cpu(
            "gradient-compare",
            params,
            ref="runners.adapt.library:module",
            workload_params=MODULE,
            root=relu,
            base_root=gelu,
        )
    )
    assert r.outcome == "failed", r.reason
    assert "beyond" in (r.reason or "")


def test_a_reference_no_path_computes_leaves_only_the_nll_inconclusive(
    run_cpu: Runner, no_float64: Path
) -> None:
    r = only(
        run_cpu(
            "regression-24view",
            {"views": 4, "seq": 8},
            ref="nofloat64:make",
            root=no_float64,
            workload_params=TINY,
        )
    )
    assert r.outcome == "inconclusive", r.reason
    reason = r.reason or ""
    assert "the chunked NLL could not be judged" in reason
    assert "float64" in reason and "Double" in reason
    assert 'rule = "threshold"' in reason  # what would fix it
    m = r.measurements
    assert "Double" in str(m["reference_skipped"])
    # What needed no reference was judged: both runs repeated, bit for bit.
    assert m["pooled_max_abs_diff"] == 0.0


def test_outputs_that_do_not_repeat_still_fail_without_a_reference(
    run_cpu: Runner, no_float64: Path
) -> None:
    r = only(
        run_cpu(
            "regression-24view",
            {"views": 4, "seq": 8},
            ref="nofloat64:make",
            root=no_float64,
            workload_params={**TINY, "noisy": True},
        )
    )
    assert r.outcome == "failed", r.reason
    assert "did not repeat" in (r.reason or "")


def test_an_exception_in_the_codes_own_step_still_fails(run_cpu: Runner, no_float64: Path) -> None:
    r = only(
        run_cpu(
            "regression-24view",
            {"views": 4, "seq": 8},
            ref="nofloat64:make",
            root=no_float64,
            workload_params={**TINY, "own_step_raises": True},
        )
    )
    assert r.outcome == "failed", r.reason
    assert "a real bug in the code's own step" in (r.reason or "")
