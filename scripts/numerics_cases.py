"""Numerical changes to a workload, each its own commit: benign ones and planted defects.

`make_cases_repo` creates a real git repository whose ``main`` holds a workload
and a plan, and one commit per case on top of ``main``, published as
``refs/pull/N/head`` (N in `cases` order) and as branch ``case/NAME``. A
gradient comparison of each case against ``main`` must pass the benign ones
(a kernel swap that only moves rounding) and fail the defects.

Workloads:

- ``qwen3``: transformers' Qwen3-MoE with PEFT LoRA (``examples/qwen3_moe``).
  Benign: attention eager -> SDPA; experts fused (the library's default) ->
  the experts' loop. Defects: expert 1 of the first MoE layer scaled by 1.01; the
  last decoder layer drops its residual; LoRA built with ``alpha / r`` as its
  alpha (scaling ``alpha / r**2``).
- ``moe``: the reference MoE (`runners.workloads.moe`, as ``model/``). Benign:
  SDPA -> explicit softmax attention; the fused ``addmm`` of the expert LoRA ->
  unfused matmuls. Defects: expert 1's output scaled by 1.01; the last layer
  drops its residual; LoRA scaled by ``alpha`` instead of ``alpha / r``.

``python -m scripts.numerics_cases PATH --workload qwen3 [--plan FILE]`` makes one
and prints the pull request number of each case.
"""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import git

Kind = Literal["benign", "defect"]
WorkloadName = Literal["qwen3", "moe"]

_REPO = Path(__file__).resolve().parents[1]
_AUTHOR = git.Actor("Ledger Example", "example@ledger.invalid")
_DATE = dt.datetime(2026, 9, 20, 12, 0, tzinfo=dt.UTC)


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    kind: Kind
    path: str
    """The file the commit edits."""
    old: str
    """Text that occurs exactly once in the file."""
    new: str
    """What replaces it."""
    message: str


_QWEN = "qwen3_lora/workload.py"
_QWEN_SETUP = "        self.device = device\n        trainable = "

QWEN3_CASES = (
    Case(
        "sdpa",
        "benign",
        _QWEN,
        '    attention: str = "eager"\n',
        '    attention: str = "sdpa"\n',
        "Attention through SDPA instead of the eager implementation",
    ),
    Case(
        "experts-loop",
        "benign",
        _QWEN,
        "    experts_impl: str | None = None\n",
        '    experts_impl: str | None = "eager"\n',
        "Experts through their loop instead of the fused kernel",
    ),
    Case(
        "expert-scale",
        "defect",
        _QWEN,
        _QWEN_SETUP,
        "        self.device = device\n"
        "        experts = self.model.base_model.model.model.layers[0].mlp.experts\n"
        "        unscaled = experts.forward\n"
        "        experts.forward = lambda h, idx, w: unscaled(\n"
        "            h, idx, torch.where(idx == 1, w * 1.01, w)\n"
        "        )\n"
        "        trainable = ",
        "Weigh expert 1 of the first MoE layer by 1.01",
    ),
    Case(
        "dropped-residual",
        "defect",
        _QWEN,
        _QWEN_SETUP,
        "        self.device = device\n"
        "        last = self.model.base_model.model.model.layers[-1]\n\n"
        "        def no_residual(_m: Any, args: Any, kwargs: Any, out: Any) -> Any:\n"
        "            h = args[0] if args else kwargs['hidden_states']\n"
        "            return (out[0] - h, *out[1:]) if isinstance(out, tuple) else out - h\n\n"
        "        last.register_forward_hook(no_residual, with_kwargs=True)\n"
        "        trainable = ",
        "Last decoder layer without its residual",
    ),
    Case(
        "lora-scaling",
        "defect",
        _QWEN,
        "                lora_alpha=c.lora_alpha,\n",
        "                lora_alpha=c.lora_alpha / c.lora_rank,\n",
        "LoRA alpha given as alpha / r",
    ),
)

_MOE = "model/workload.py"

MOE_CASES = (
    Case(
        "eager-attention",
        "benign",
        _MOE,
        "        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)\n",
        "        scores = (q @ k.transpose(-2, -1)) * hd**-0.5\n"
        "        causal = torch.ones(seq, seq, dtype=torch.bool, device=x.device).tril()\n"
        '        o = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1) @ v\n'
        "        del scores, causal\n",
        "Attention as an explicit softmax instead of SDPA",
    ),
    Case(
        "unfused-lora",
        "benign",
        _MOE,
        "            pre = torch.addmm(xe @ self.w1[e], xe @ self.lora_a1[e], self.lora_b1[e], "
        "alpha=scale)\n",
        "            pre = xe @ self.w1[e] + scale * ((xe @ self.lora_a1[e]) @ self.lora_b1[e])\n",
        "Expert LoRA through separate matmuls instead of one addmm",
    ),
    Case(
        "expert-scale",
        "defect",
        _MOE,
        "            del act\n            e += 1\n",
        "            del act\n"
        "            if e == 1:\n"
        "                outs[-1] = outs[-1] * 1.01\n"
        "            e += 1\n",
        "Weigh expert 1's output by 1.01",
    ),
    Case(
        "dropped-residual",
        "defect",
        _MOE,
        "            x = layer.forward(x, batch, seq)\n",
        "            x = layer.forward(x, batch, seq) - (x if layer is self.layers[-1] else 0)\n",
        "Last layer without its residual",
    ),
    Case(
        "lora-scaling",
        "defect",
        _MOE,
        "        scale = cfg.lora_alpha / cfg.lora_rank\n",
        "        scale = cfg.lora_alpha\n",
        "LoRA scaled by alpha instead of alpha / r",
    ),
)

CASES: dict[WorkloadName, tuple[Case, ...]] = {"qwen3": QWEN3_CASES, "moe": MOE_CASES}

WORKLOAD_REF: dict[WorkloadName, str] = {
    "qwen3": "qwen3_lora.workload:make_workload",
    "moe": "model.workload:make_workload",
}


def _plan(workload: WorkloadName) -> str:
    return (
        f'workload = "{WORKLOAD_REF[workload]}"\n\n'
        "[[claims]]\n"
        'name = "numerics.gradient-compare"\n'
        'check = "gradient-compare"\n'
        "params = { batch = 1, seq = 16 }\n"
    )


def _files(workload: WorkloadName) -> dict[str, str]:
    if workload == "qwen3":
        src = _REPO / "examples" / "qwen3_moe" / "qwen3_lora"
        return {f"qwen3_lora/{p.name}": p.read_text() for p in sorted(src.glob("*.py"))}
    wl = _REPO / "runners" / "workloads"
    return {
        "model/__init__.py": '"""MoE workload package."""\n',
        "model/workload.py": (wl / "moe.py").read_text(),
        "model/estimator.py": (wl / "estimator.py").read_text(),
    }


@dataclass(frozen=True, slots=True)
class CasesRepo:
    path: Path
    base: str
    """``main``'s commit."""
    commits: dict[str, str]
    """Each case's commit, by case name."""
    prs: dict[str, int]
    """Each case's pull request number."""
    workload_ref: str


def _commit(repo: git.Repo, paths: Sequence[str], message: str) -> str:
    repo.index.add(list(paths))
    c = repo.index.commit(
        message + "\n",
        author=_AUTHOR,
        committer=_AUTHOR,
        author_date=_DATE,
        commit_date=_DATE,
        skip_hooks=True,
    )
    return str(c.hexsha)


def make_cases_repo(path: Path, workload: WorkloadName, plan: str | None = None) -> CasesRepo:
    """The repository (module docstring) at ``path``, which must not exist or be empty;
    ``plan``: the text of ``qualification.toml`` (default: one gradient comparison)."""
    path = Path(path)
    if path.exists() and any(path.iterdir()):
        raise FileExistsError(f"{path} exists and is not empty")
    path.mkdir(parents=True, exist_ok=True)
    files = {**_files(workload), "qualification.toml": plan or _plan(workload)}
    for case in CASES[workload]:
        if files[case.path].count(case.old) != 1:
            raise RuntimeError(f"case {case.name}: {case.path} no longer holds its text once")
    repo = git.Repo.init(path, initial_branch="main")
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    base = _commit(repo, sorted(files), f"The {workload} workload and its plan")
    commits: dict[str, str] = {}
    prs: dict[str, int] = {}
    for n, case in enumerate(CASES[workload], start=1):
        repo.git.checkout("-b", f"case/{case.name}", "main")
        (path / case.path).write_text(files[case.path].replace(case.old, case.new))
        commits[case.name] = _commit(repo, [case.path], f"{case.message} ({case.kind})")
        repo.git.update_ref(f"refs/pull/{n}/head", commits[case.name])
        prs[case.name] = n
    repo.git.checkout("main")
    repo.close()
    return CasesRepo(path, base, commits, prs, WORKLOAD_REF[workload])


def checkout(repo: CasesRepo, commit: str, dest: Path) -> Path:
    """A detached worktree of ``commit`` at ``dest``."""
    with git.Repo(repo.path) as r:
        r.git.worktree("add", "--detach", str(dest), commit)
    return dest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.numerics_cases")
    parser.add_argument("path", type=Path)
    parser.add_argument("--workload", choices=sorted(CASES), default="qwen3")
    parser.add_argument("--plan", type=Path, help="qualification.toml to commit on main")
    args = parser.parse_args(argv)
    made = make_cases_repo(args.path, args.workload, args.plan.read_text() if args.plan else None)
    print(f"main {made.base}")
    for case in CASES[args.workload]:
        print(f"pr {made.prs[case.name]} {case.kind} {case.name} {made.commits[case.name]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
