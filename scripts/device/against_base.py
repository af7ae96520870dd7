"""Three repositories whose PR 1 changes only the model's definition in the plan, for
the 24-view regression judged against the base on a GPU (scripts/device_against_base.sh):

- ``qwen3-eager``: examples/qwen3_adapter (the Qwen3-MoE + LoRA trainer through the
  ready adapter, ~0.9 B parameters in bf16 at ``--profile h200``); the PR swaps the
  attention kernel SDPA -> eager. Benign: every claim must qualify.
- ``qwen3-eps``: the same model; the PR moves every RMSNorm's epsilon 1e-6 -> 1e-3.
  A real change of what the model computes: the regression must fail against the base.
- ``gpt2-sdpa``: transformers' GPT-2 (124 M parameters, its library defaults: dropout
  0.1) through the ready adapter; the PR swaps attention eager -> SDPA. Benign: the
  regression and its observer-off control must qualify (dropout live in no-grad views
  accused it before evaluation mode).

    python3 -m scripts.device.against_base DIR
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import git

ROOT = Path(__file__).resolve().parents[2]
PR_REF = "refs/pull/1/head"
AUTHOR = git.Actor("Third Party", "tp@example.invalid")

__all__ = ["CASES", "make"]

_H200_CONFIG_END = "tie_word_embeddings = false }, lora = { r = 16"

GPT2_PLAN = """\
# transformers' GPT-2 from its config (124 M parameters), library defaults: dropout 0.1.
workload = "runners.adapt.library:causal_lm"
preload = ["transformers"]

[workload_params]
model_type = "gpt2"
dtype = "float32"
attention = "{attention}"
config = {{ vocab_size = 50257, n_positions = 1024, n_embd = 768, n_layer = 12, n_head = 12 }}

[package]
paths = ["*.py"]

[[claims]]
name = "regression.24view-nograd"
check = "regression-24view"
params = {{ views = 24, seq = 256 }}
carry_over = "package"

[[claims]]
name = "observer.off-control"
check = "observer-off-control"
params = {{ check = "regression-24view", params = {{ views = 24, seq = 256 }} }}
carry_over = "package"
"""


def _repo(root: Path, files: dict[str, str]) -> git.Repo:
    root.mkdir(parents=True)
    for name, text in files.items():
        (root / name).write_text(text)
    repo = git.Repo.init(root, initial_branch="main")
    repo.git.remote("add", "origin", f"https://example.invalid/{root.name}.git")
    repo.index.add(sorted(files))
    repo.index.commit("The model and its plan\n", author=AUTHOR, committer=AUTHOR)
    return repo


def _pr(repo: git.Repo, root: Path, name: str, text: str, message: str) -> None:
    repo.git.checkout("-b", "pr-1")
    (root / name).write_text(text)
    repo.index.add([name])
    head = repo.index.commit(message, author=AUTHOR, committer=AUTHOR)
    repo.git.update_ref(PR_REF, head.hexsha)
    repo.git.checkout("main")


def _adapter_files() -> dict[str, str]:
    src = ROOT / "examples" / "qwen3_adapter"
    return {p.name: p.read_text() for p in sorted(src.iterdir()) if p.is_file()}


def qwen3_eager(root: Path) -> None:
    files = _adapter_files()
    repo = _repo(root, files)
    plan = files["qualification.toml"]
    swapped = plan.replace(
        '[profiles.h200]\nworkload_params = { attention = "sdpa"',
        '[profiles.h200]\nworkload_params = { attention = "eager"',
    )
    if swapped == plan:
        raise SystemExit("examples/qwen3_adapter: the h200 profile names no sdpa attention")
    _pr(repo, root, "qualification.toml", swapped, "Attention: eager instead of SDPA\n")


def qwen3_eps(root: Path) -> None:
    files = _adapter_files()
    repo = _repo(root, files)
    plan = files["qualification.toml"]
    if plan.count(_H200_CONFIG_END) != 1:
        raise SystemExit("examples/qwen3_adapter: the h200 profile's config moved")
    moved = plan.replace(
        _H200_CONFIG_END, _H200_CONFIG_END.replace("false }", "false, rms_norm_eps = 1e-3 }")
    )
    _pr(repo, root, "qualification.toml", moved, "RMSNorm epsilon 1e-3\n")


def gpt2_sdpa(root: Path) -> None:
    repo = _repo(root, {"qualification.toml": GPT2_PLAN.format(attention="eager")})
    _pr(
        repo,
        root,
        "qualification.toml",
        GPT2_PLAN.format(attention="sdpa"),
        "Attention: SDPA instead of eager\n",
    )


CASES = {"qwen3-eager": qwen3_eager, "qwen3-eps": qwen3_eps, "gpt2-sdpa": gpt2_sdpa}


def make(out: Path, names: list[str] | None = None) -> None:
    for name in names or sorted(CASES):
        shutil.rmtree(out / name, ignore_errors=True)
        CASES[name](out / name)


def main() -> int:
    make(Path(sys.argv[1]), sys.argv[2:] or None)
    print(sys.argv[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
