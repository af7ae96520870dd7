"""What is judged comes from the head; how it is judged, from the base. With the ready
adapter the model lives in `qualification.toml`'s `workload_params`: a pull request that
changes `lora_alpha` 16 -> 17 there runs its own model (gradient-compare compares the
base's model with the head's, and fails), and every receipt names both plans; a pull
request that only loosens a claim's threshold stays "proposed, not applied"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import git
import pytest

from tests.conftest import commit_file
from tests.ledger.helpers import run

pytest.importorskip("transformers")
pytest.importorskip("peft")

LLAMA = """
workload = "runners.adapt.library:causal_lm"
preload = ["transformers", "peft"]

[workload_params]
model_type = "llama"
dtype = "float32"
attention = "eager"

[workload_params.config]
vocab_size = 128
hidden_size = 32
intermediate_size = 64
num_hidden_layers = 1
num_attention_heads = 2
num_key_value_heads = 1
head_dim = 16
tie_word_embeddings = false

[workload_params.lora]
r = 4
lora_alpha = 16
target_modules = ["q_proj", "v_proj"]

[[claims]]
name = "numerics.gradient-compare"
check = "gradient-compare"
params = { batch = 1, seq = 8 }
cleanup = false
"""


@pytest.fixture
def repo(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> git.Repo:
    """main with the Llama plan; PR 1 changes only lora_alpha; PR 2 only loosens the
    gradient-compare threshold."""
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    r = git.Repo.init(tmp_path / "up", initial_branch="main")
    commit_file(r, "README.md", "a model\n", "base")
    commit_file(r, "qualification.toml", LLAMA, "plan")
    for pr, text, what in (
        (1, LLAMA.replace("lora_alpha = 16", "lora_alpha = 17"), "lora_alpha 16 -> 17"),
        (2, LLAMA.replace("{ batch = 1, seq = 8 }", "{ batch = 1, seq = 8, threshold = 1.0 }"),
         "loosen the threshold"),
    ):  # fmt: skip
        r.git.checkout("-b", f"pr{pr}", "main")
        commit_file(r, "qualification.toml", text, what)
        r.git.update_ref(f"refs/pull/{pr}/head", r.head.commit.hexsha)
    r.git.checkout("main")
    return r


def _qualify(capsys: pytest.CaptureFixture[str], r: git.Repo, pr: int) -> tuple[Any, Any]:
    res = run(
        capsys, "qualify", "--pr", str(pr), "--offline", "--repo", str(r.working_tree_dir),
        "--device", "cpu", "--json",
    )  # fmt: skip
    doc = json.loads(res.out)
    [rec] = doc["receipts"]
    shown = json.loads(run(capsys, "show", rec["id"], "--json").out)
    return doc, shown["statement"]["predicate"]


def test_a_prs_model_change_is_tested_and_its_gate_change_is_not_applied(
    repo: git.Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    doc, p = _qualify(capsys, repo, 1)
    # The head's model ran against the base's: the LoRA scale changed the gradients.
    assert p["outcome"] == "failed", (p["outcome"], p["reason"])
    assert doc["status"]["qualified"] is False
    env = p["runner"]["environment"]
    base = repo.commit("main").hexsha
    head = repo.commit("refs/pull/1/head").hexsha
    assert base[:12] in env["plan_source"] and head in env["workload_source"]
    assert env["workload_differs"] == "workload_params.lora.lora_alpha: 16 -> 17"
    assert p["check"]["parameters"]["base_workload_params"]["lora"]["lora_alpha"] == 16
    judged = doc["status"]["judged"]
    assert any("workload definition" in n for n in judged), judged
    assert not any("proposed, not applied" in n for n in judged), judged

    doc, p = _qualify(capsys, repo, 2)
    # The loosened threshold is the PR's proposal: the base's gate judged it.
    assert p["check"]["parameters"].get("threshold") != 1.0
    assert not p["check"]["parameters"].get("base_workload_params")
    assert "workload_differs" not in p["runner"]["environment"]
    assert p["outcome"] == "passed", p["reason"]
    judged = doc["status"]["judged"]
    assert any("proposed, not applied" in n for n in judged), judged
    assert not any("workload definition" in n for n in judged), judged


def test_a_comparison_names_a_workload_file_that_differs(tmp_path: Path) -> None:
    from ledger.execution.definitions import file_differs

    r = git.Repo.init(tmp_path / "w", initial_branch="main")
    base = commit_file(r, "model/workload.py", "SCALE = 1\n", "base")
    head = commit_file(r, "model/workload.py", "SCALE = 2\n", "head")
    said = file_differs(r, base, head, "model.workload:make_workload")
    blob = (r.commit(head).tree / "model/workload.py").hexsha
    assert said is not None and said.startswith("workload file model/workload.py: ")
    assert said.endswith(blob[:12])
    assert file_differs(r, head, head, "model.workload:make_workload") is None
    # A library's entry point is no file of the repository.
    assert file_differs(r, base, head, "runners.adapt.library:causal_lm") is None


def test_the_doctor_probes_the_heads_workload_definition(
    repo: git.Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    repo.git.checkout("-b", "pr3", "main")
    commit_file(
        repo,
        "qualification.toml",
        LLAMA.replace("runners.adapt.library:causal_lm", "model.missing:make"),
        "a workload the head does not have",
    )
    repo.git.update_ref("refs/pull/3/head", repo.head.commit.hexsha)
    repo.git.checkout("main")
    res = run(capsys, "doctor", "--pr", "3", "--offline", "--repo", str(repo.working_tree_dir))
    assert res.code == 1 and "model.missing" in res.out + res.err, (res.out, res.err)
