"""The 24-view regression runs no-grad views as a trainer evaluates and judges the
head's outputs against the base's, run from the base's own tree.

Real git repositories (a base commit, heads on branches, each checked out as a
worktree), the real check through `runners.api.run_claim` with the base's tree
handed as `ledger qualify` hands it, tiny library models on the CPU."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import git
import pytest
import torch

from runners.adapt.library import module
from runners.api import run_claim
from runners.checks import observer_off_control, regression_24view
from runners.contract.result import CheckResult, Json
from runners.fork.forkparent import ForkServer
from runners.harness.child import env
from runners.protocol import Shape, SupportsModes, enter_mode

pytest.importorskip("transformers")

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
FROZEN = Path(__file__).resolve().parents[2] / "examples" / "frozen_protocol"
ACTOR = git.Actor("T", "t@example.invalid")

CNN = """
import torch

from runners.protocol import ForwardOutputs


class Net(torch.nn.Module):
    def __init__(self, width, norm, refuse_f64, p_drop):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, width, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(width) if norm else torch.nn.Identity()
        self.drop = torch.nn.Dropout(p_drop)
        self.head = torch.nn.Linear(width, 4)
        self.refuse_f64 = refuse_f64

    def forward(self, x):
        if self.refuse_f64 and x.dtype == torch.float64:
            raise RuntimeError("this team's kernel has no float64")
        h = torch.relu(self.bn(self.conv(x)))
        return self.head(self.drop(h.mean(dim=(2, 3))))
{train}

def build(width, norm=True, refuse_f64=False, p_drop=0.3):
    return Net(width, norm, refuse_f64, p_drop)


def loss(model, batch):
    logits = model(batch["pixels"])
    got = torch.nn.functional.cross_entropy(logits.float(), batch["target"])
    return ForwardOutputs(loss=got, compared={{"logits": logits.detach()}})


def batch(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return {{
        "pixels": torch.randn(shape.batch, 1, shape.seq, shape.seq, generator=g) * 3 + 1,
        "target": torch.randint(4, (shape.batch,), generator=g),
    }}
"""

HEADS = {
    "same": "",
    # The PR's defect: BatchNorm left on batch statistics when the trainer evaluates.
    "bn-train": """
    def train(self, mode=True):
        super().train(mode)
        self.bn.train(True)
        return self
""",
    # The evaluation switch dropped: dropout stays live under no-grad.
    "no-eval": """
    def train(self, mode=True):
        return super().train(True)
""",
}

CNN_PARAMS: dict[str, Json] = {
    "factory": "cnn:build",
    "loss": "cnn:loss",
    "batch": "cnn:batch",
    "factory_params": {"width": 8},
}
MODULE = "runners.adapt.library:module"
LM = "runners.adapt.library:causal_lm"
FROZEN_REF = "qwen3_frozen.workload:make_workload"
MOVED = "from qwen3_frozen.workload import make_workload\n"
GPT2: dict[str, Json] = {
    "model_type": "gpt2",
    # Library defaults left as they are: dropout 0.1 everywhere.
    "config": {"vocab_size": 128, "n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 64},
    "attention": "sdpa",
}
QWEN3 = {"vocab": 128, "hidden": 32, "layers": 1, "heads": 2, "kv_heads": 1, "head_dim": 16}
QWEN3 |= {"experts": 4, "moe_ff": 32, "lora_rank": 4, "padding": 2}


ROUTED = "routed_variant:make_workload"
ROUTED_VARIANT = '''
"""The frozen Qwen3-MoE workload with its routers changed (a test's heads and bases)."""

import dataclasses
from typing import Any

import torch
from qwen3_frozen.workload import FrozenConfig, FrozenQwen3Workload

_SCALE = (1.0, -1.0, 0.5, -0.5)


class RoutedVariant(FrozenQwen3Workload):
    def __init__(
        self, config: FrozenConfig, nudge: float, favour: float, tie: float, gain: float
    ) -> None:
        super().__init__(config)
        self.nudge, self.favour, self.tie, self.gain = nudge, favour, tie, gain

    def setup(self, device: torch.device, seed: int) -> None:
        super().setup(device, seed)
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                if "experts" in name and "down_proj" in name and "lora" not in name:
                    # Experts whose outputs matter beside the residual: a token sent to
                    # another expert moves its hidden state.
                    p.mul_(self.gain)
        for name, gate in self.model.named_modules():
            if not name.endswith("mlp.gate"):
                continue
            with torch.no_grad():
                w = gate.weight.float()
                if self.tie:
                    # Experts 1 and 2 nearly alike: many tokens near a tie between them.
                    w[1] = w[2] * (1 + self.tie)
                if self.favour:
                    # A real router regression: expert 0's logits scaled.
                    w[0] *= self.favour
                gate.weight.copy_(w.to(gate.weight.dtype))
            if self.nudge:
                gate.register_forward_hook(self._rounded)

    def _rounded(self, gate: Any, _args: Any, out: Any) -> Any:
        """A bfloat16 kernel that rounds the router's logits otherwise (each expert's by
        a few of bfloat16's units); in a wider precision the same function as before."""
        logits = out[0]
        if logits.dtype != torch.bfloat16:
            return None
        scale = torch.tensor(_SCALE, device=logits.device).repeat(logits.shape[-1] // 4)
        logits = (logits.float() * (1 + self.nudge * scale)).to(logits.dtype)
        probs = torch.softmax(logits, dim=-1, dtype=torch.float)
        top, index = probs.topk(gate.top_k, dim=-1)
        top = top / top.sum(dim=-1, keepdim=True) if gate.norm_topk_prob else top
        return logits, top.to(logits.dtype), index


class DeclaringVariant(RoutedVariant):
    """Declares its routing and its routers' margins (its own hooks), replays none."""

    declaring = False

    def setup(self, device: torch.device, seed: int) -> None:
        super().setup(device, seed)
        self.routed: dict[str, torch.Tensor] = {}
        self.margins: dict[str, torch.Tensor] = {}
        for name, gate in self.model.named_modules():
            if name.endswith("mlp.gate"):
                gate.register_forward_hook(self._seen(name.removeprefix("base_model.model.")))

    def _seen(self, name: str) -> Any:
        def hook(gate: Any, _args: Any, out: Any) -> None:
            if self.declaring:
                probs = torch.softmax(out[0].double(), dim=-1)
                top = probs.topk(gate.top_k + 1, dim=-1).values
                self.routed[name] = out[2].detach()
                self.margins[name] = (top[:, -2] - top[:, -1]).float()

        return hook

    def declare_routing(self, on: bool) -> None:
        self.declaring = on

    def router_margins(self) -> dict[str, torch.Tensor]:
        return dict(self.margins)

    def forward(self, batch: Any, *, grad: bool) -> Any:
        self.routed = {}
        out = super().forward(batch, grad=grad)
        return dataclasses.replace(out, routing=dict(self.routed))


def make_workload(
    nudge: float = 0.0,
    favour: float = 0.0,
    tie: float = 0.0,
    gain: float = 1.0,
    declares: bool = False,
    **params: Any,
) -> RoutedVariant:
    kind = DeclaringVariant if declares else RoutedVariant
    return kind(FrozenConfig(**params), nudge, favour, tie, gain)
'''


def _commit(repo: git.Repo, root: Path, files: dict[str, str], msg: str) -> str:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    repo.index.add(sorted(files))
    return repo.index.commit(msg, author=ACTOR, committer=ACTOR).hexsha


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The base commit's worktree and one worktree per head, each a branch off it: the
    team's CNN (its defects), the Qwen3-MoE example's workload, the frozen one."""
    top = tmp_path_factory.mktemp("against-base")
    root = top / "repo"
    root.mkdir()
    repo = git.Repo.init(root)
    files = {"cnn.py": CNN.format(train=""), "routed_variant.py": ROUTED_VARIANT}
    for src in (EXAMPLES / "qwen3_moe" / "qwen3_lora", FROZEN / "qwen3_frozen"):
        for f in src.glob("*.py"):
            files[f"{src.name}/{f.name}"] = f.read_text()
    base = _commit(repo, root, files, "base")
    out = {"base": top / "base"}
    repo.git.worktree("add", "--detach", str(out["base"]), base)
    for name, train in HEADS.items():
        repo.git.checkout("-b", name, base)
        text = {"cnn.py": CNN.format(train=train)} if train else {"README": name}
        head = _commit(repo, root, text, name)
        out[name] = top / name
        repo.git.worktree("add", "--detach", str(out[name]), head)
    # A head whose plan names a workload module of its own, absent from the base's tree.
    repo.git.checkout("-b", "moved", base)
    head = _commit(repo, root, {"frozen_moved.py": MOVED}, "moved")
    out["moved"] = top / "moved"
    repo.git.worktree("add", "--detach", str(out["moved"]), head)
    # The base tree's fork server, as `ledger qualify` starts one: its arms fork from it
    # (torch and the workloads' modules imported once) instead of starting afresh.
    refs = [MODULE, LM, "qwen3_lora.workload:make_workload", FROZEN_REF, ROUTED]
    server = ForkServer.launch([(str(out["base"]), r) for r in refs], env()).wait()
    before = os.environ.get("LEDGER_FORK_SERVERS")
    os.environ["LEDGER_FORK_SERVERS"] = json.dumps({str(out["base"]): str(server.sock)})
    try:
        yield out
    finally:
        if before is None:
            os.environ.pop("LEDGER_FORK_SERVERS", None)
        else:
            os.environ["LEDGER_FORK_SERVERS"] = before
        server.close()
        for p in out.values():
            shutil.rmtree(p, ignore_errors=True)
        sys.modules.pop("cnn", None)


def claim(
    check: str,
    params: dict[str, Json],
    *,
    ref: str,
    workload_params: dict[str, Json],
    head: Path,
    base: Path | None,
    tmp: Path,
    observer_off: bool = False,
) -> list[CheckResult]:
    return run_claim(
        claim="regression.24view-nograd",
        check=check,
        params={**params, **({"observer": "on"} if observer_off else {})},
        repo_root=head,
        workload_ref=ref,
        workload_params=workload_params,
        device="cpu",
        observer_off_required=observer_off,
        base_root=base,
        progress=lambda _m: None,
        artifact_dir=tmp / "artifacts",
    )


def cnn(trees: dict[str, Path], head: str, tmp: Path, **factory: Json) -> CheckResult:
    wp = {**CNN_PARAMS, "factory_params": {"width": 8, **factory}}
    (r,) = claim(
        "regression-24view",
        {"seq": 8},
        ref=MODULE,
        workload_params=wp,
        head=trees[head],
        base=trees["base"],
        tmp=tmp,
    )
    return r


def test_the_ready_adapters_evaluate_no_grad_views_and_train_gradient_steps(
    trees: dict[str, Path],
) -> None:
    sys.path.insert(0, str(trees["base"]))
    try:
        w = module(**CNN_PARAMS)
        w.setup(torch.device("cpu"), 0)
        assert isinstance(w, SupportsModes)
        batch = w.make_batch(Shape(batch=4, seq=8), 0)
        w.forward(batch, grad=False)
        assert not w.model.training and not w.model.bn.training
        w.forward(batch, grad=True)
        assert w.model.training
        assert enter_mode(w, grad=False) == "eval" and not w.model.training
        w.teardown()
    finally:
        sys.path.remove(str(trees["base"]))
        sys.modules.pop("cnn", None)


def test_gpt2_with_library_dropout_swapping_eager_for_sdpa_qualifies(
    trees: dict[str, Path], tmp_path: Path
) -> None:
    """Dropout 0.1 as the library ships it: evaluated, repeated from one random state,
    and within the rule against the base's eager attention; the control reuses the
    base's arms and finds the observer changed nothing."""
    results = claim(
        "regression-24view",
        {"seq": 16, "base_workload_params": {"attention": "eager"}},
        ref=LM,
        workload_params=GPT2,
        head=trees["same"],
        base=trees["base"],
        tmp=tmp_path,
        observer_off=True,
    )
    assert [(r.check, r.check_version) for r in results] == [
        ("regression-24view", "4"),
        ("regression-24view", "4"),
        ("observer-off-control", "2"),
    ]
    assert [r.outcome for r in results] == ["passed"] * 3, [r.reason for r in results]
    # What the check loaded of the base's arms is released with it, in each run.
    assert all(r.cleanup.complete for r in results), [r.cleanup for r in results]
    on, off, _ = results
    m = on.measurements
    assert m["workload_modes"] == {"forward_nograd": "eval"}
    assert m["forward_seed"] == 0 and m["base_comparison"] == "compared"
    assert m["base_root"] == str(trees["base"])
    rows = {r["name"]: r for r in m["against_base"]}  # type: ignore[union-attr,index]
    assert set(rows) == {"loss", "logits"}
    # A kernel swap moves the logits by rounding only, within the base's own floor.
    assert 0 < rows["logits"]["max_abs"] < 1e-4 and rows["logits"]["state"] == "passed"
    assert m["base_arms"]["reference"]["dtype"] == "float64"  # type: ignore[index]
    assert "base_arms_reused" not in m and off.measurements["base_arms_reused"] is True
    assert off.measurements["against_base"] == m["against_base"]


def test_batchnorm_kept_training_when_evaluating_fails_with_its_deciding_figure(
    trees: dict[str, Path], tmp_path: Path
) -> None:
    r = cnn(trees, "bn-train", tmp_path)
    assert r.outcome == "failed", r.reason
    assert r.reason is not None and "against the base: logits: max abs " in r.reason
    assert " vs allowance " in r.reason and "precision floor" in r.reason
    rows = {x["name"]: x for x in r.measurements["against_base"]}  # type: ignore[union-attr,index]
    allowed = rows["logits"]["allowed"]
    assert isinstance(allowed, float) and f"vs allowance {allowed:.3g}" in r.reason
    assert rows["logits"]["max_abs"] > 0.05 and rows["logits"]["state"] == "failed"
    deciding = r.measurements["deciding"]
    assert deciding["key"] == "against_base_err" and deciding["bound"] == allowed  # type: ignore[index]
    assert deciding["value"] == rows["logits"]["err_candidate"]  # type: ignore[index]
    # The head repeats itself bit for bit: only the base tells the defect.
    assert all(x["max_abs_diff"] == 0.0 for x in r.measurements["outputs"])  # type: ignore[union-attr,index]


def test_the_same_code_from_another_tree_passes(trees: dict[str, Path], tmp_path: Path) -> None:
    r = cnn(trees, "same", tmp_path)
    assert r.outcome == "passed", r.reason
    assert r.cleanup.complete, r.cleanup
    assert r.measurements["workload_modes"] == {"forward_nograd": "eval"}
    rows = {x["name"]: x for x in r.measurements["against_base"]}  # type: ignore[union-attr,index]
    assert rows["logits"]["max_abs"] == 0.0


def test_dropout_live_under_no_grad_still_fails(trees: dict[str, Path], tmp_path: Path) -> None:
    """Its two runs repeat (one random state), so the base alone tells it."""
    r = cnn(trees, "no-eval", tmp_path, norm=False)
    assert r.outcome == "failed", r.reason
    assert r.reason is not None and r.reason.startswith("against the base: logits: max abs")
    assert all(x["max_abs_diff"] == 0.0 for x in r.measurements["outputs"])  # type: ignore[union-attr,index]


def test_a_reference_that_cannot_compute_leaves_it_inconclusive(
    trees: dict[str, Path], tmp_path: Path
) -> None:
    r = cnn(trees, "same", tmp_path, refuse_f64=True)
    assert r.outcome == "inconclusive", r.reason
    assert r.reason is not None and "the base's no-grad outputs could not be computed" in r.reason
    assert "reference arm" in r.reason and "no float64" in r.reason
    assert r.measurements["base_arms"]["base"]["status"] == "ok"  # type: ignore[index]


def test_without_a_base_tree_the_comparison_is_skipped_and_said(
    trees: dict[str, Path], tmp_path: Path
) -> None:
    (r,) = claim(
        "regression-24view",
        {"seq": 8},
        ref=MODULE,
        workload_params=CNN_PARAMS,
        head=trees["bn-train"],
        base=None,
        tmp=tmp_path,
    )
    assert r.outcome == "passed", r.reason
    assert str(r.measurements["base_comparison"]).startswith("skipped: no base tree was handed")
    assert "against_base" not in r.measurements


@pytest.mark.slow
def test_an_moe_kernel_swap_passes_on_the_base_routing(
    trees: dict[str, Path], tmp_path: Path
) -> None:
    (r,) = claim(
        "regression-24view",
        {"views": 24, "seq": 8, "base_workload_params": {"attention": "eager"}},
        ref="qwen3_lora.workload:make_workload",
        workload_params={**QWEN3, "attention": "sdpa"},
        head=trees["same"],
        base=trees["base"],
        tmp=tmp_path,
    )
    assert r.outcome == "passed", r.reason
    routed = r.measurements["base_routing"]
    assert routed["routing_replay"] == "replayed"  # type: ignore[index]
    assert routed["routing_replay_route"] == "workload"  # type: ignore[index]
    assert routed["head_vs_base"]["comparable"] is True  # type: ignore[index]


FROZEN_TINY: dict[str, Json] = {"vocab": 128, "hidden": 32, "layers": 1, "heads": 2}
FROZEN_TINY |= {"kv_heads": 1, "head_dim": 16, "experts": 4, "dtype": "bfloat16"}


@pytest.mark.slow
def test_a_router_regression_still_fails_on_the_base_routing(
    trees: dict[str, Path], tmp_path: Path
) -> None:
    """The head's routers weigh their top k without renormalising: replaying the base's
    selections through the harness's hooks does not hide it."""
    (r,) = claim(
        "regression-24view",
        {"views": 24, "seq": 8, "base_workload_params": {"norm_topk_prob": True}},
        ref=FROZEN_REF,
        workload_params={**FROZEN_TINY, "norm_topk_prob": False},
        head=trees["same"],
        base=trees["base"],
        tmp=tmp_path,
    )
    assert r.outcome == "failed", r.reason
    assert r.reason is not None and "against the base: " in r.reason
    routed = r.measurements["base_routing"]
    assert routed["routing_replay"] == "replayed"  # type: ignore[index]
    assert routed["routing_replay_route"] == "harness-hooks"  # type: ignore[index]


@pytest.mark.slow
def test_the_frozen_protocol_workload_keeps_its_verdict_against_its_base(
    trees: dict[str, Path], tmp_path: Path
) -> None:
    """Earlier protocol: no modes offered, called as before; the same code passes."""
    (r,) = claim(
        "regression-24view",
        {"views": 24, "seq": 8},
        ref=FROZEN_REF,
        workload_params=FROZEN_TINY,
        head=trees["same"],
        base=trees["base"],
        tmp=tmp_path,
    )
    assert r.outcome == "passed", r.reason
    assert r.measurements["workload_modes"] == {"forward_nograd": "not offered"}
    assert r.measurements["base_comparison"] == "compared"


def test_versions_mark_the_fix() -> None:
    assert regression_24view.VERSION == "4"
    assert observer_off_control.VERSION == "2"


PLAN = """
workload = "runners.adapt.library:causal_lm"
[workload_params]
model_type = "gpt2"
attention = "{attention}"
[[claims]]
name = "regression.24view-nograd"
check = "regression-24view"
"""


def test_the_base_fork_server_is_prepared_from_the_bases_own_plan(tmp_path: Path) -> None:
    from ledger.execution.local_run import base_spec
    from ledger.qualification.plan import parse_plan

    head = parse_plan(PLAN.format(attention="sdpa"))
    base = parse_plan(PLAN.format(attention="eager"))
    spec = base_spec(tmp_path, head, base, head.claims, [])
    prepared = {json.dumps(p, sort_keys=True) for _, _, p in spec.prepare}
    assert [json.loads(p)["attention"] for p in prepared] == ["eager"]
    # Without a plan in the base tree: the head's definition, as before.
    spec = base_spec(tmp_path, head, None, head.claims, [])
    assert [p["attention"] for _, _, p in spec.prepare] == ["sdpa"]


def test_a_gradient_step_runs_in_training_mode_and_the_receipt_says_so(
    trees: dict[str, Path], tmp_path: Path
) -> None:
    (r,) = claim(
        "cleanup",
        {"batch": 2, "seq": 8},
        ref=MODULE,
        workload_params=CNN_PARAMS,
        head=trees["same"],
        base=None,
        tmp=tmp_path,
    )
    assert r.outcome == "passed", r.reason
    assert r.measurements["workload_modes"] == {"forward_backward": "train"}


def test_a_pr_that_redefines_the_workload_hands_the_base_arms_the_bases_definition() -> None:
    """Both checks that compare against the base take the base's parameters as the runner
    hands them (the observer-off control passes them on to the regression it wraps)."""
    from ledger.execution.definitions import claim_runs
    from ledger.qualification.plan import parse_plan

    control = """
[[claims]]
name = "observer.off-control"
check = "observer-off-control"
params = { check = "regression-24view", params = { views = 24, seq = 16 } }
"""
    head = parse_plan(PLAN.format(attention="sdpa") + control)
    base = parse_plan(PLAN.format(attention="eager") + control)
    runs = claim_runs(head, head.claims, "cpu", None, base)
    for r in runs:
        assert r.needs_base and r.workload_params["attention"] == "sdpa"
        assert r.params["base_workload_params"]["attention"] == "eager"  # type: ignore[index]
    reg, ctl = runs
    assert regression_24view.Params.parse(reg.params).base_workload_params["attention"] == "eager"
    p = observer_off_control.Params.parse(ctl.params)
    assert p.base_workload_params["attention"] == "eager"


def test_the_base_arms_load_the_bases_own_entry_point_where_the_head_names_another(
    trees: dict[str, Path], tmp_path: Path
) -> None:
    """A head whose plan points the workload at a module only the head has: the base's
    arms load the base plan's entry point (as the runner hands it: base_workload_ref);
    without it they cannot load, and the comparison is inconclusive, never failed."""
    moved = "frozen_moved:make_workload"
    for given, outcome in ((FROZEN_REF, "passed"), ("", "inconclusive")):
        (r,) = claim(
            "regression-24view",
            {"views": 24, "seq": 8, "base_workload_ref": given},
            ref=moved,
            workload_params=FROZEN_TINY,
            head=trees["moved"],
            base=trees["base"],
            tmp=tmp_path / (given or "none"),
        )
        assert r.outcome == outcome, r.reason
    assert "frozen_moved" in r.reason


def test_the_runner_hands_the_base_arms_the_bases_entry_point() -> None:
    from ledger.execution.definitions import claim_runs
    from ledger.qualification.plan import parse_plan

    text = PLAN.replace('"runners.adapt.library:causal_lm"', '"{ref}"')
    head = parse_plan(text.format(ref="model.new:make", attention="eager"))
    base = parse_plan(text.format(ref="model.old:make", attention="eager"))
    [r] = claim_runs(head, head.claims, "cpu", None, base)
    assert r.workload_ref == "model.new:make"
    assert r.params["base_workload_ref"] == "model.old:make"
    [same] = claim_runs(base, base.claims, "cpu", None, base)
    assert "base_workload_ref" not in same.params


def routed(trees: dict[str, Path], tmp: Path, base: dict[str, Json], head: dict[str, Json]) -> Any:
    """The routed variant on its own routing (the base's replay turned off, or none to
    turn off), its base's routers and head's as given, its experts' outputs weighing
    beside the residual: the result and what it set aside."""
    (r,) = claim(
        "regression-24view",
        {
            "views": 24,
            "seq": 8,
            # A workload that declares its routing offers no replay of its own.
            "replay_base_routing": bool(head.get("declares")),
            "base_workload_params": {"nudge": 0.0, "favour": 0.0, "tie": 0.0, **base},
        },
        ref=ROUTED,
        workload_params={**FROZEN_TINY, "gain": 30.0, **head},
        head=trees["same"],
        base=trees["base"],
        tmp=tmp,
    )
    routed = r.measurements["base_routing"]
    if head.get("declares"):
        assert routed["routing_route"] == "workload", routed
    else:
        assert routed["routing_replay"] == "not asked (replay_base_routing = false)", routed
    return r, routed["set_aside"]


def test_near_tie_flips_the_head_cannot_replay_are_set_aside_and_the_rest_passes(
    trees: dict[str, Path], tmp_path: Path
) -> None:
    """A bfloat16 router kernel rounding otherwise (5 %; float32 unchanged): the two tokens
    it flips have a base margin within what float32 moves it; judged on them, the loss
    and the pooled rows fail (0.0625 against an allowance of 0.0119)."""
    r, aside = routed(trees, tmp_path, {}, {"nudge": 0.05})
    assert r.outcome == "passed", r.reason
    assert aside["tokens_differing"] == aside["tokens_set_aside"] > 0, aside
    assert aside["tokens_differing_judged"] == 0 and aside["tokens"] == 24 * 8
    assert aside["share_set_aside"] == aside["tokens_set_aside"] / 192
    # The scalars over every token are not judged; the views without a flip are.
    assert aside["not_judged"] == ["loss"]
    assert 0 < aside["views_set_aside"] <= aside["tokens_set_aside"]
    rows = {x["name"]: x for x in r.measurements["against_base"]}  # type: ignore[union-attr,index]
    assert set(rows) == {"pooled_hidden"} and rows["pooled_hidden"]["state"] == "passed"


def test_a_router_regression_the_head_cannot_replay_still_fails(
    trees: dict[str, Path], tmp_path: Path
) -> None:
    """Expert 0's router logits tripled: most flips have a large base margin, judged."""
    r, aside = routed(trees, tmp_path, {}, {"favour": 3.0})
    assert r.outcome == "failed", r.reason
    assert aside["tokens_differing_judged"] > aside["tokens_set_aside"], aside
    assert r.reason is not None and r.reason.startswith("against the base: pooled_hidden")
    assert "routed otherwise than the base on a near tie" in r.reason


def test_too_many_near_ties_set_aside_leave_it_inconclusive(
    trees: dict[str, Path], tmp_path: Path
) -> None:
    """Two experts' router rows 1 % apart in base and head: a rounding-sized change flips
    more than 5 % of the tokens, each on a near tie; what is left passes, unqualified."""
    r, aside = routed(trees, tmp_path, {"tie": 0.01}, {"tie": 0.01, "nudge": 0.01})
    assert r.outcome == "inconclusive", r.reason
    assert aside["share_set_aside"] > 0.05 and aside["tokens_differing_judged"] == 0, aside
    assert r.reason is not None and "over the 5 % (max_set_aside_share)" in r.reason


def test_a_workload_that_declares_routing_and_margins_but_cannot_replay(
    trees: dict[str, Path], tmp_path: Path
) -> None:
    """The same near-tie flips, seen through the workload's own declaration (no replay
    offered): set aside by the margins it offers (DeclaresRouterMargins)."""
    r, aside = routed(trees, tmp_path, {}, {"nudge": 0.05, "declares": True})
    assert r.outcome == "passed", r.reason
    assert r.measurements["base_routing"]["routing_replay"] == (  # type: ignore[index]
        "the workload cannot replay routing"
    )
    assert aside["tokens_differing"] == aside["tokens_set_aside"] > 0, aside
