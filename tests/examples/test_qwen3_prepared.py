"""The Qwen3-MoE example's prepared model: reused by every setup, never changed by one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("peft")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "qwen3_moe"))

from qwen3_lora.workload import make_workload

from runners.protocol import Shape

CPU = torch.device("cpu")
TINY = {"vocab": 128, "hidden": 32, "layers": 1, "heads": 2, "kv_heads": 1, "head_dim": 16}


def grads(w: object, *, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """One forward and backward of ``w`` set up on the CPU (seed 0)."""
    w.setup(CPU, 0, dtype=dtype)  # type: ignore[attr-defined]
    out = w.forward(w.make_batch(Shape(batch=2, seq=8), seed=3), grad=True)  # type: ignore[attr-defined]
    w.backward(out)  # type: ignore[attr-defined]
    g: dict[str, torch.Tensor] = w.gradients()  # type: ignore[attr-defined]
    w.optimizer_step()  # type: ignore[attr-defined]
    w.teardown()  # type: ignore[attr-defined]
    return g


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: t.detach().clone() for n, t in model.state_dict().items()}


@pytest.mark.parametrize("dtype", [None, torch.float64])
def test_setup_from_prepared_equals_a_fresh_build(dtype: torch.dtype | None) -> None:
    # The reference arm (dtype given) switches the copy to the experts' loop instead of
    # building the model again: the same gradients, bit for bit, as a fresh build.
    fresh = make_workload(**TINY)
    prepared = make_workload(**TINY)
    prepared.prepare()
    assert prepared._prepared is not None
    before = snapshot(prepared._prepared[1])
    a, b = grads(fresh, dtype=dtype), grads(prepared, dtype=dtype)
    assert a.keys() == b.keys() and a
    for name in a:
        assert torch.equal(a[name], b[name]), name
    # Training the copy (an optimizer step above) left the prepared weights as built.
    after = snapshot(prepared._prepared[1])
    assert all(torch.equal(before[n], after[n]) for n in before)


def test_a_copy_for_another_device_aliases_the_weights_until_it_moves() -> None:
    from qwen3_lora.workload import _private_copy

    w = make_workload(**TINY)
    w.prepare()
    assert w._prepared is not None
    model = w._prepared[1]
    copy = _private_copy(model, torch.device("meta"))
    ptr = {n: p.data_ptr() for n, p in model.named_parameters()}
    # No bytes copied: the copy's parameters are new objects over the same storage.
    for n, p in copy.named_parameters():
        assert p.data_ptr() == ptr[n] and p is not dict(model.named_parameters())[n]
    copy.to(torch.device("meta"))
    # Moving the copy replaced its tensors; the prepared model still holds its own.
    assert {p.device.type for p in copy.parameters()} == {"meta"}
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    assert {n: p.data_ptr() for n, p in model.named_parameters()} == ptr
