"""Routing without workload code: for a transformers MoE whose workload declares no
routing (frozen at the earlier protocol), the harness finds the routers itself
(`runners.adapt.routers`), counts flipped routings and replays them, so the benign
swaps of the CPU bf16 case are never failed and the defects still fail."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from runners.adapt.held import modules_held
from runners.adapt.routers import RouterHooks, find_routers
from runners.protocol import Shape
from tests.examples.test_frozen_protocol import FROZEN, make_repo
from tests.ledger.helpers import run

pytest.importorskip("transformers")
pytest.importorskip("peft")

sys.path.insert(0, str(FROZEN))

from qwen3_frozen.workload import make_workload

CPU = torch.device("cpu")
TINY = {"vocab": 128, "hidden": 32, "layers": 2, "heads": 2, "kv_heads": 1, "head_dim": 16}


def _step(w: object, hooks: RouterHooks) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    batch = w.make_batch(Shape(batch=2, seq=8), seed=3)  # type: ignore[attr-defined]
    out = w.forward(batch, grad=True)  # type: ignore[attr-defined]
    w.backward(out)  # type: ignore[attr-defined]
    grads: dict[str, torch.Tensor] = w.gradients()  # type: ignore[attr-defined]
    w.zero_grad()  # type: ignore[attr-defined]
    assert out.pooled_hidden is not None
    return out.pooled_hidden, grads


def test_the_routers_of_a_peft_wrapped_qwen3_moe_are_found_and_replayed() -> None:
    w = make_workload(**TINY)
    w.setup(CPU, 0)
    routers = find_routers(modules_held(w))
    assert sorted(routers) == ["model.layers.0.mlp.gate", "model.layers.1.mlp.gate"]
    hooks = RouterHooks(routers)
    hooks.recording = True
    pooled, grads = _step(w, hooks)
    own = hooks.take()
    assert {n: tuple(t.shape) for n, t in own.items()} == {n: (16, 2) for n in routers}
    hooks.replay(own)  # its own choice, replayed: the same step, bit for bit
    again, grads_again = _step(w, hooks)
    assert hooks.replayed == 2 and not hooks.broken
    assert torch.equal(pooled, again)
    assert all(torch.equal(grads[n], grads_again[n]) for n in grads)
    hooks.replay({n: (t + 1) % 8 for n, t in own.items()})  # every token elsewhere
    moved, _ = _step(w, hooks)
    assert not torch.equal(pooled, moved)
    hooks.detach()


def test_a_router_whose_weights_are_not_the_formula_is_not_replayed() -> None:
    w = make_workload(**TINY)
    w.setup(CPU, 0)
    routers = find_routers(modules_held(w))
    first = routers["model.layers.0.mlp.gate"]
    hooks = RouterHooks(routers)
    hooks.recording = True
    _step(w, hooks)
    hooks.replay(hooks.take())
    # A router weighing its choice otherwise than a softmax over its top k.
    first.forward = _halved(first.forward)  # type: ignore[method-assign]
    _step(w, hooks)
    assert hooks.broken == ["model.layers.0.mlp.gate"] and hooks.replayed == 1


def _halved(forward: object) -> object:
    def f(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        logits, weights, index = forward(h)  # type: ignore[operator]
        return logits, weights * 0.5, index

    return f


PLAN = """
workload = "qwen3_frozen.workload:make_workload"

[workload_params]
vocab = 512
hidden = 128
layers = 2
dtype = "bfloat16"
{claims}
"""

CASES = {
    "benign.sdpa": ("passed", {"attention": "sdpa"}),
    "benign.experts-loop": ("passed", {"experts_impl": "eager"}),
    "defect.lora-alpha": ("failed", {"lora_alpha": 17}),
    "defect.no-renormalise": ("failed", {"norm_topk_prob": False}),
}


@pytest.mark.slow
def test_benign_swaps_never_fail_and_defects_do_with_routing_found_by_the_harness(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    plan = tmp_path / "plan.toml"
    plan.write_text(
        PLAN.format(
            claims="".join(
                f'\n[[claims]]\nname = "{name}"\ncheck = "gradient-compare"\n'
                f"params = {{ batch = 1, seq = 16, candidate_workload_params = {{ "
                + ", ".join(f"{k} = {_toml(v)}" for k, v in params.items())
                + " } }\n"
                for name, (_, params) in CASES.items()
            )
        )
    )
    repo = make_repo(tmp_path / "frozen")
    r = run(
        capsys,
        *("qualify", "--rev", "HEAD", "--repo", str(repo), "--plan", str(plan)),
        *("--device", "cpu", "--json"),
    )
    doc = json.loads(r.out)
    for x in doc["receipts"]:
        pred = json.loads(run(capsys, "show", x["id"], "--json").out)["statement"]["predicate"]
        want, _ = CASES[x["claim"]]
        m = pred["measurements"]
        if want == "passed":
            assert pred["outcome"] in ("passed", "inconclusive"), (x["claim"], pred["reason"])
            if pred["outcome"] == "inconclusive":
                assert "routed differently" in pred["reason"]
        else:
            assert pred["outcome"] == "failed", (x["claim"], pred.get("reason"))
        for arm in ("base", "candidate", "reference", "candidate_reference"):
            assert m[f"{arm}_routing_route"] == "harness-hooks"
            assert m[f"{arm}_routers_found"] == 2
        assert m["candidate_reference_routing_replay"] == "replayed"
        assert m["candidate_reference_routing_replay_route"] == "harness-hooks"
        assert m["candidate_reference_routing_replayed_layers"] == 2
        assert m["routing"]["candidate_vs_base"]["layers"] == 2
    assert {x["claim"] for x in doc["receipts"]} == set(CASES)


def _toml(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else json.dumps(v)
