"""The protocol as trainers use it: shapes beyond batch x seq, padded and packed
batches, the framework's loss and declared outputs, cold told to the estimate, and
workloads written against the earlier protocol."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from runners.protocol import (
    AdmissionDecision,
    ForwardOutputs,
    MemoryEstimate,
    Shape,
    SupportsChunkedNLL,
    admit_of,
    batch_tokens,
    estimate_of,
    pack_sequences,
    pad_sequences,
)
from runners.workloads.moe import make_workload


def test_shapes_carry_named_dimensions() -> None:
    s = Shape.parse("4x1024,tokens=3500,experts=8")
    assert (s.batch, s.seq, s.tokens, s.dim("experts")) == (4, 1024, 3500, 8)
    assert str(s) == "4x1024,experts=8,tokens=3500"
    assert Shape.parse("2x16").tokens == 32 and Shape.parse("2x16").dims == ()
    for bad in ("4by16", "0x16", "4x16,tokens", "4x16,=3"):
        with pytest.raises(ValueError):
            Shape.parse(bad)


def test_padded_batches_mask_and_ignore_padding() -> None:
    b = pad_sequences([torch.tensor([5, 6, 7]), torch.tensor([8])], pad_id=0)
    assert b["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert b["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert b["labels"].tolist() == [[5, 6, 7], [8, -100, -100]]
    assert batch_tokens(b) == 4


def test_packed_batches_carry_cu_seqlens() -> None:
    b = pack_sequences([torch.tensor([1, 2, 3]), torch.tensor([4, 5])])
    assert b["input_ids"].tolist() == [[1, 2, 3, 4, 5]]
    assert b["cu_seqlens"].tolist() == [0, 3, 5] and b["cu_seqlens"].dtype == torch.int32
    assert b["position_ids"].tolist() == [[0, 1, 2, 0, 1]]
    assert b["labels"].tolist() == [[-100, 2, 3, -100, 5]]  # no target across sequences
    assert batch_tokens(b) == 3


def test_declared_outputs_take_the_frameworks_loss() -> None:
    loss = torch.tensor(2.5, requires_grad=True) * 1.0
    out = ForwardOutputs(loss=loss, compared={"logits": torch.ones(2, 3)})
    declared = out.declared()
    assert set(declared) == {"loss", "logits"} and not declared["loss"].requires_grad
    assert out.pooled_hidden is None and float(out.scalar_loss()) == 2.5  # type: ignore[arg-type]
    ref = ForwardOutputs(pooled_hidden=torch.zeros(1, 4), nll=torch.tensor(1.0), loss=loss)
    assert set(ref.declared()) == {"loss", "pooled_hidden"} and float(ref.declared()["loss"]) == 1


class _OldStyle:
    """A workload written against the earlier protocol: no ``cold`` keyword."""

    def estimate(self, shape: Shape, phase: str) -> MemoryEstimate:
        return MemoryEstimate(predicted_bytes=shape.tokens)

    def admit(self, shape: Shape, phase: str, free_bytes: int) -> AdmissionDecision:
        p = shape.tokens
        return AdmissionDecision(
            admitted=p <= free_bytes, predicted_bytes=p, usable_bytes=free_bytes, reserve_bytes=0
        )


def test_cold_is_told_to_workloads_that_take_it_and_old_ones_still_work() -> None:
    old: Any = _OldStyle()
    s = Shape(batch=2, seq=8)
    assert estimate_of(old, s, "forward_nograd", cold=True).predicted_bytes == 16
    assert admit_of(old, s, "forward_nograd", 100, cold=True).admitted
    w = make_workload(d_model=32, n_layers=1)
    w.setup(torch.device("cpu"), 0)
    # The reference workload takes `cold` (CPU: no workspace to price, same figure).
    cold = estimate_of(w, s, "forward_backward", cold=True)
    warm = estimate_of(w, s, "forward_backward", cold=False)
    assert cold.predicted_bytes == warm.predicted_bytes > 0
    assert isinstance(w, SupportsChunkedNLL)


def test_on_cuda_a_cold_phase_prices_the_cublas_workspaces() -> None:
    from runners.workloads.estimator import cublas_workspace_bytes, cublaslt_workspace_bytes

    w = make_workload(d_model=32, n_layers=1)
    w.device = torch.device("cuda")  # the estimate reads the device kind only
    s = Shape(batch=2, seq=8)
    per_thread = cublas_workspace_bytes() + cublaslt_workspace_bytes()
    for phase, threads in (("forward_nograd", 1), ("forward_backward", 2)):
        cold = w.estimate(s, phase, cold=True).predicted_bytes  # type: ignore[arg-type]
        warm = w.estimate(s, phase, cold=False).predicted_bytes  # type: ignore[arg-type]
        assert cold - warm == threads * per_thread
