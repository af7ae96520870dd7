"""The Qwen3-MoE example's routers take given selections (`ReplaysRouting`): their own
choice replayed changes nothing, another choice sends tokens elsewhere, and what the
workload declares stays the router's own choice."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("peft")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "qwen3_moe"))

from qwen3_lora.workload import Qwen3LoraWorkload, make_workload

from runners.protocol import ReplaysRouting, Shape

CPU = torch.device("cpu")
TINY = {"vocab": 128, "hidden": 32, "layers": 2, "heads": 2, "kv_heads": 1, "head_dim": 16}


def step(w: Qwen3LoraWorkload) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict]:
    """(logits, gradients, declared routing) of one forward and backward, seed 0."""
    w.setup(CPU, 0)
    w.declare_routing(True)
    out = w.forward(w.make_batch(Shape(batch=2, seq=8), seed=3), grad=True)
    w.backward(out)
    grads = w.gradients()
    w.teardown()
    return out.compared["logits"], grads, out.routing


def test_replaying_its_own_routing_is_the_same_step() -> None:
    w = make_workload(**TINY)
    assert isinstance(w, ReplaysRouting)
    logits, grads, own = step(w)
    assert len(own) == 2 and w.replayed_layers() == 0
    w.replay_routing(own)
    again, grads_again, declared = step(w)
    assert w.replayed_layers() == 2
    assert torch.equal(logits, again)
    assert all(torch.equal(grads[n], grads_again[n]) for n in grads)
    assert all(torch.equal(own[n], declared[n]) for n in own)


def test_replaying_other_experts_moves_the_tokens_and_declares_the_routers_choice() -> None:
    w = make_workload(**TINY)
    logits, grads, own = step(w)
    other = {n: (t + 1) % 8 for n, t in own.items()}  # every token to other experts
    w.replay_routing(other)
    moved, moved_grads, declared = step(w)
    assert w.replayed_layers() == 2
    assert not torch.equal(logits, moved)
    assert any(not torch.equal(grads[n], moved_grads[n]) for n in grads)
    # What the workload declares is still the router's own top-k (of the first layer,
    # whose input the replay has not changed yet).
    first = min(own)
    assert torch.equal(declared[first], own[first])
    w.replay_routing(None)
    assert torch.equal(step(w)[0], logits)
