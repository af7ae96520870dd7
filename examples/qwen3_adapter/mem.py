"""Memory estimator for the ready adapter's Qwen3-MoE + LoRA (``estimator = "mem:estimate"``).

The Qwen3-MoE LoRA example's estimator (examples/qwen3_moe/qwen3_lora/estimator.py,
copied: this repository holds only its plan and this file), called with the
adapter's ``workload_params`` (`estimate` at the end). Its notes follow.

The terms follow what the step holds at its peak; each coefficient is how many
such tensors were live at the peak, read with `ledger profile` on CPU over six
configs x five shapes x both phases (fitted, then rounded up):

- ``logits``: tokens x vocab in float32 (the model upcasts for the loss; the
  backward holds the softmax gradient beside them);
- ``hidden``: tokens x hidden per layer, saved for the backward (norms, residuals);
- ``experts``: tokens x top_k x moe_ff per layer (the routed rows' activations);
- ``scores``: batch x heads x seq^2 per layer (eager attention's probabilities);
- ``expert_delta``: the expert weights plus LoRA's delta (PEFT's
  ``target_parameters`` materialises ``W + B A`` for each 3-D expert weight,
  one layer at a time without grad, every layer's kept for the backward);
- ``router``: tokens x experts per layer (logits and probabilities, kept);
- ``lora_grads``: one gradient per trainable parameter (forward_backward);
- ``sdpa_saved``: with SDPA, the query, key, value and output each layer's fused
  attention kernel keeps for the backward (forward_backward). The CPU fit ran eager
  attention, whose ``scores`` stood for them; measured on an H200 at the ``h200``
  profile (cuDNN attention, bfloat16), the step held 1.47 MB a token where the
  other terms predicted 1.36 MB; q, k, v and the output are 0.08 MB a token (0.10 with
  the margin);
- ``margin``: 25 % of the rest (the fit's worst measured/fitted ratio was 1.23);
- on CUDA, cold phases add cuBLAS/cuBLASLt workspaces (one per thread running its
  first matmul) and every tensor rounds up to 512 bytes (``cuda_rounding``).

It never calls the model: the numbers come from the config alone.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

from runners.protocol import MemoryEstimate, Phase, Shape
from runners.workloads.estimator import cublas_workspace_bytes, cublaslt_workspace_bytes

CUDA_OUTSIDE_POOL_RESERVE_BYTES = 512 * 1024 * 1024
"""Admission allowance on CUDA for memory outside the allocator's pool (lazily loaded
kernels, library handles), as the reference workload states it."""

MARGIN = 0.25

# Live copies at the peak, per term and phase (see the module docstring).
_COEF: dict[Phase, dict[str, float]] = {
    "forward_nograd": {
        "logits": 1.25,
        "hidden": 1.0,
        "experts": 1.5,
        "scores": 0.75,
        "expert_delta": 1.25,
        "router": 1.0,
    },
    "forward_backward": {
        "logits": 4.0,
        "hidden": 10.0,
        "experts": 1.5,
        "scores": 1.5,
        "expert_delta": 1.0,
        "router": 66.0,
        "lora_grads": 1.0,
        "sdpa_saved": 1.0,
    },
}


def lora_parameter_count(c: Any) -> int:
    """Trainable LoRA parameters: A and B on q/k/v/o and on both 3-D expert weights."""
    q, kv = c.heads * c.head_dim, c.kv_heads * c.head_dim
    pairs = ((c.hidden, q), (c.hidden, kv), (c.hidden, kv), (q, c.hidden))
    attn = sum(c.lora_rank * (i + o) for i, o in pairs)
    # PEFT's ParamWrapper: A [E*r, in], B [out, E*r] per 3-D weight.
    experts = c.lora_rank * c.experts * ((c.hidden + 2 * c.moe_ff) + (c.moe_ff + c.hidden))
    return int(c.layers * (attn + experts))


def estimate_config(
    c: Any, shape: Shape, phase: Phase, device_kind: str, *, cold: bool
) -> MemoryEstimate:
    """Predicted reset-to-peak increment of ``phase`` at ``shape`` for config ``c``."""
    if phase not in _COEF:
        raise ValueError(f"unknown phase {phase!r}")
    item = 2 if c.dtype == "bfloat16" else 4
    b, s, t, layers = shape.batch, shape.seq, shape.tokens, c.layers
    grad = phase == "forward_backward"
    expert_w = c.experts * 3 * c.moe_ff * c.hidden * item
    base = {
        "logits": t * c.vocab * 4,
        "hidden": t * c.hidden * layers * item,
        "experts": t * c.top_k * c.moe_ff * layers * item,
        "scores": (b * c.heads * s * s * layers * item) if c.attention == "eager" else 0,
        "expert_delta": expert_w * (layers if grad else 1),
        "router": t * c.experts * layers * 4,
        "lora_grads": lora_parameter_count(c) * item,
        "sdpa_saved": (
            t * 2 * (c.heads + c.kv_heads) * c.head_dim * layers * item
            if c.attention == "sdpa"
            else 0
        ),
    }
    terms = {k: math.ceil(base[k] * f) for k, f in _COEF[phase].items()}
    terms["margin"] = math.ceil(sum(terms.values()) * MARGIN)
    if device_kind == "cuda":
        terms["cuda_rounding"] = 512 * (40 * layers + 16)
        if cold:
            threads = 2 if grad else 1
            terms["cuda_cublas_workspace"] = threads * cublas_workspace_bytes()
            terms["cuda_cublaslt_workspace"] = threads * cublaslt_workspace_bytes()
    return MemoryEstimate(predicted_bytes=sum(terms.values()), terms=terms)


def estimate(
    params: dict[str, Any], shape: Shape, phase: Phase, device_kind: str, *, cold: bool
) -> MemoryEstimate:
    """The adapter's estimator entry (`runners.adapt.library`): its workload parameters
    read as the example's config."""
    cfg = params["config"]
    c = SimpleNamespace(
        dtype=params["dtype"],
        attention=params["attention"],
        vocab=cfg["vocab_size"],
        hidden=cfg["hidden_size"],
        layers=cfg["num_hidden_layers"],
        heads=cfg["num_attention_heads"],
        kv_heads=cfg["num_key_value_heads"],
        head_dim=cfg["head_dim"],
        experts=cfg["num_experts"],
        top_k=cfg["num_experts_per_tok"],
        moe_ff=cfg["moe_intermediate_size"],
        lora_rank=(params.get("lora") or {}).get("r", 0),
    )
    return estimate_config(c, shape, phase, device_kind, cold=cold)
