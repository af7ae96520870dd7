"""Library models without a workload file: a plan names a ready adapter
(`runners.adapt.library`) and every check works through it; admission on a
plan-named estimator or, naming none, the built-in one, and the doctor says which."""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest

from tests.ledger.helpers import run

QWEN = """
workload = "runners.adapt.library:causal_lm"
preload = ["transformers", "peft"]

[workload_params]
model_type = "qwen3_moe"
dtype = "bfloat16"
attention = "eager"
padding = 2
{estimator}
[workload_params.config]
vocab_size = 128
hidden_size = 32
intermediate_size = 64
moe_intermediate_size = 32
num_hidden_layers = 2
num_attention_heads = 2
num_key_value_heads = 1
head_dim = 16
num_experts = 4
num_experts_per_tok = 2
tie_word_embeddings = false

[workload_params.lora]
r = 4
lora_alpha = 8
target_modules = ["q_proj", "k_proj", "v_proj", "o_proj"]
target_parameters = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]

[[claims]]
name = "admission.no-oom-after-admit"
check = "admission"
params = {{ batches = [1], seqs = [8, 16], warm_runs = 0 }}

[[claims]]
name = "regression.24view-nograd"
check = "regression-24view"
params = {{ views = 4, seq = 8 }}

[[claims]]
name = "numerics.gradient-compare"
check = "gradient-compare"
params = {{ batch = 1, seq = 8 }}

[[claims]]
name = "cleanup.all-released"
check = "cleanup"
params = {{ batch = 1, seq = 8 }}
"""

ESTIMATOR = '''
def estimate(params, shape, phase, device_kind, *, cold):
    """Generous: 64 MiB plus 1 MiB per token."""
    return (64 << 20) + shape.batch * shape.seq * (1 << 20)
'''

MODULE_PLAN = """
workload = "runners.adapt.library:module"

[workload_params]
factory = "toy:build"
loss = "toy:loss"
batch = "toy:batch"
factory_params = { width = 16 }
dtype = "bfloat16"

[[claims]]
name = "numerics.gradient-compare"
check = "gradient-compare"
params = { batch = 2, seq = 4 }

[[claims]]
name = "cleanup.all-released"
check = "cleanup"
params = { batch = 2, seq = 4 }
"""

TOY = """
import torch

def build(width):
    layers = [torch.nn.Linear(4, width), torch.nn.GELU(), torch.nn.Linear(width, 1)]
    return torch.nn.Sequential(*layers)

def loss(model, batch):
    return ((model(batch["x"]).squeeze(-1) - batch["y"]) ** 2).mean()

def batch(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(shape.batch * shape.seq, 4, generator=g),
            "y": torch.randn(shape.batch * shape.seq, generator=g)}
"""


def repo_of(path: Path, files: dict[str, str]) -> Path:
    path.mkdir()
    for name, text in files.items():
        (path / name).write_text(text)
    repo = git.Repo.init(path)
    repo.index.add(sorted(files))
    actor = git.Actor("T", "t@example.invalid")
    repo.index.commit("plan", author=actor, committer=actor)
    repo.create_remote("origin", f"https://example.invalid/{path.name}.git")
    return path


def qualify(
    capsys: pytest.CaptureFixture[str], repo: Path, *, qualified: bool = True
) -> dict[str, dict]:
    r = run(capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--device", "cpu", "--json")
    doc = json.loads(r.out)
    # Passed is not enough: each pass holds (cleanup proof, signature) and qualifies.
    assert doc["status"]["qualified"] is qualified, doc["status"]
    preds = {}
    for x in doc["receipts"]:
        shown = json.loads(run(capsys, "show", x["id"], "--json").out)
        preds[x["claim"]] = shown["statement"]["predicate"]
    return preds


@pytest.fixture
def ledger_env(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0


@pytest.mark.slow
@pytest.mark.usefixtures("ledger_env")
def test_a_transformers_moe_with_lora_qualifies_through_the_adapter_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    plan = QWEN.format(estimator='estimator = "est:estimate"')
    repo = repo_of(tmp_path / "qwen", {"qualification.toml": plan, "est.py": ESTIMATOR})
    preds = qualify(capsys, repo)
    assert {c: p["outcome"] for c, p in preds.items()} == dict.fromkeys(preds, "passed"), {
        c: p.get("reason") for c, p in preds.items()
    }
    assert len(preds) == 4
    assert {p["scope"]["workload"] for p in preds.values()} == {"hf-qwen3_moe-lora"}
    grad = preds["numerics.gradient-compare"]["measurements"]
    assert grad["reference_precision_route"] == "upcast-modules"
    assert grad["base_routing_route"] == "harness-hooks"
    assert grad["candidate_reference_routing_replay"] == "replayed"


@pytest.mark.slow
@pytest.mark.usefixtures("ledger_env")
def test_without_an_estimator_admission_is_judged_on_the_builtin_one_and_the_doctor_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    monkeypatch.setenv("LEDGER_CALIBRATION_DIR", str(tmp_path / "calibration"))
    repo = repo_of(tmp_path / "qwen", {"qualification.toml": QWEN.format(estimator="")})
    r = run(capsys, "doctor", "--rev", "HEAD", "--repo", str(repo), "--sandbox", "none", "--json")
    assert r.code == 0, r.err
    by = {c["claim"]: c for c in json.loads(r.out)["claims"]}
    adm = by["admission.no-oom-after-admit"]
    assert adm["judgement"] == "fallback" and adm["add"] == []
    assert adm["fallbacks"][0].startswith("estimate: the built-in estimator: calibrated")
    assert by["numerics.gradient-compare"]["judgement"] == "fallback"
    # qualify runs every claim: admission on the built-in estimator, held to its bound.
    preds = qualify(capsys, repo)
    assert {c: p["outcome"] for c, p in preds.items()} == dict.fromkeys(preds, "passed"), {
        c: p.get("reason") for c, p in preds.items()
    }
    rows = preds["admission.no-oom-after-admit"]["measurements"]["shapes"]
    assert all(str(x["calibration"]).startswith("sha256:") for x in rows)
    # The regression records the admission decision it would enforce.
    reg = preds["regression.24view-nograd"]["measurements"]
    assert "admission_skipped" not in reg and reg["admission_admitted"] is True


@pytest.mark.usefixtures("ledger_env")
def test_a_plain_torch_module_qualifies_through_the_adapter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = repo_of(tmp_path / "mod", {"qualification.toml": MODULE_PLAN, "toy.py": TOY})
    preds = qualify(capsys, repo)
    assert {c: p["outcome"] for c, p in preds.items()} == {
        "numerics.gradient-compare": "passed",
        "cleanup.all-released": "passed",
    }, {c: p.get("reason") for c, p in preds.items()}
    assert preds["cleanup.all-released"]["scope"]["workload"] == "module-build"


def test_the_docs_point_ledger_at_your_model_before_writing_a_workload() -> None:
    import inspect
    import re
    import tomllib

    from runners.adapt import library

    text = (Path(__file__).resolve().parents[2] / "docs" / "workload-protocol.md").read_text()
    lower = text.lower()
    assert lower.index("point ledger at your model") < lower.index("write a workload")
    blocks = re.findall(r"```toml\n(.*?)```", text, re.S)
    assert len(blocks) == 2
    for block in blocks:  # each example's parameters fit its adapter
        params = tomllib.loads(block)["workload_params"]
        target = library.CausalLM if "model_type" in params else library.ModuleAdapter
        inspect.signature(target).bind(**params)
