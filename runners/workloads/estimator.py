"""Memory estimator and admission controller for the reference MoE workload.

`estimate` predicts the reset-to-peak increment of a phase (see `runners.protocol`)
in exact integer bytes by walking the model's stages in execution order: each
stage contributes the tensors it leaves saved for backward (``live``) and the
temporaries alive at its own peak (``transient``). The prediction is the largest
``live + transient`` over all stages, plus `MARGIN_DIVISOR`'s margin; its terms
are that moment's components.

Bounds taken where the data decide:

- an expert receives at most one row per token (top-k picks distinct experts),
  so a single expert's working set is priced at ``min(tokens, routed rows)`` rows;
- the routed rows in total are exactly ``tokens * top_k``;
- a stage's saved tensors are priced as fully live during the whole stage.

On CUDA further terms are added: the caching allocator's 512-byte rounding per live
tensor, kernel scratch (sort, attention backward), and one cuBLAS and one cuBLASLt
workspace for each thread that runs its first matmul in the phase: the caller's
thread in the forward, autograd's device thread in the backward. cuBLAS keeps those
workspaces inside the allocator pool for the life of the process, so later phases
do not pay them again.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from runners.protocol import AdmissionDecision, MemoryEstimate, Phase, Shape

MARGIN_DIVISOR = 8
"""The margin is ``1 / MARGIN_DIVISOR`` of the walked peak: library versions differ in
which temporaries they keep."""

CUDA_BLOCK = 512
"""The CUDA caching allocator rounds every allocation up to a multiple of this."""

CUBLAS_DEFAULT_WORKSPACE_BYTES = 32 * 1024 * 1024
"""cuBLAS workspace per thread and device without ``CUBLAS_WORKSPACE_CONFIG`` (the Hopper
default; other architectures default to less)."""


CUBLASLT_DEFAULT_WORKSPACE_BYTES = 1024 * 1024
"""cuBLASLt workspace per thread and device without ``CUBLASLT_WORKSPACE_SIZE`` (used by
addmm; measured as a separate 1 MiB allocation with torch 2.11 on an H200)."""


def cublaslt_workspace_bytes(env: Mapping[str, str] = os.environ) -> int:
    """Bytes of one cuBLASLt workspace: ``CUBLASLT_WORKSPACE_SIZE`` (KiB) when set and
    well formed, else `CUBLASLT_DEFAULT_WORKSPACE_BYTES`."""
    try:
        kib = int(env.get("CUBLASLT_WORKSPACE_SIZE", ""))
    except ValueError:
        return CUBLASLT_DEFAULT_WORKSPACE_BYTES
    return max(kib * 1024, CUBLASLT_DEFAULT_WORKSPACE_BYTES)


def cublas_workspace_bytes(env: Mapping[str, str] = os.environ) -> int:
    """Bytes of one cuBLAS workspace: ``CUBLAS_WORKSPACE_CONFIG`` (``:KiB:count`` pairs)
    when set and well formed, else `CUBLAS_DEFAULT_WORKSPACE_BYTES`."""
    spec = env.get("CUBLAS_WORKSPACE_CONFIG", "")
    parts = spec.split(":")
    if len(parts) < 3 or parts[0] or len(parts) % 2 == 0:
        return CUBLAS_DEFAULT_WORKSPACE_BYTES
    try:
        sizes = [int(parts[i]) * int(parts[i + 1]) for i in range(1, len(parts), 2)]
    except ValueError:
        return CUBLAS_DEFAULT_WORKSPACE_BYTES
    return max(sum(sizes) * 1024, CUBLAS_DEFAULT_WORKSPACE_BYTES)


F32 = 4
I64 = 8


class _Config(Protocol):
    @property
    def vocab(self) -> int: ...
    @property
    def d_model(self) -> int: ...
    @property
    def n_layers(self) -> int: ...
    @property
    def n_heads(self) -> int: ...
    @property
    def n_experts(self) -> int: ...
    @property
    def top_k(self) -> int: ...
    @property
    def d_ff(self) -> int: ...
    @property
    def lora_rank(self) -> int: ...
    @property
    def torch_dtype(self) -> object: ...


@dataclass(frozen=True, slots=True)
class Dims:
    """The model sizes the estimate depends on."""

    vocab: int
    d: int
    layers: int
    heads: int
    experts: int
    top_k: int
    ff: int
    rank: int
    es: int
    """Bytes per element of the parameter / activation dtype."""

    @classmethod
    def of(cls, cfg: _Config) -> Dims:
        """Dims of a `MoEConfig`-like object."""
        itemsize = getattr(cfg.torch_dtype, "itemsize", None)
        if not isinstance(itemsize, int):
            raise TypeError(f"cannot size dtype {cfg.torch_dtype!r}")
        return cls(
            vocab=cfg.vocab,
            d=cfg.d_model,
            layers=cfg.n_layers,
            heads=cfg.n_heads,
            experts=cfg.n_experts,
            top_k=cfg.top_k,
            ff=cfg.d_ff,
            rank=cfg.lora_rank,
            es=itemsize,
        )

    def lora_bytes_per_layer(self) -> int:
        """Bytes of one layer's LoRA adapters (and of their gradients)."""
        return self.experts * 2 * (self.d + self.ff) * self.rank * self.es


class _Walk:
    """Running ``live`` bytes by term, and the largest ``live + transient`` moment seen."""

    def __init__(self) -> None:
        self.live: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.peak_total = 0
        self.peak_stage = ""

    def add(self, term: str, n: int) -> None:
        self.live[term] = self.live.get(term, 0) + n

    def moment(self, stage: str, transient: dict[str, int]) -> None:
        total = sum(self.live.values()) + sum(transient.values())
        if total > self.peak_total:
            self.peak_total = total
            self.peak_stage = stage
            merged = {k: v for k, v in self.live.items() if v}
            for k, v in transient.items():
                if v:
                    merged[f"{stage}:{k}"] = v
            self.peak = merged


def _walk(dm: Dims, shape: Shape, grad: bool, cuda: bool) -> _Walk:
    es, d, ff, r, k, e, v = dm.es, dm.d, dm.ff, dm.rank, dm.top_k, dm.experts, dm.vocab
    t = shape.tokens
    rows = t * k
    td = t * d * es
    rd = rows * d * es
    stats = 2 * t * F32  # layer_norm mean and rstd
    seq_lse = -(-shape.seq // 32) * 32 if cuda else shape.seq
    lse = shape.batch * dm.heads * seq_lse * F32
    idx = rows * I64
    c = min(t, rows)  # rows one expert can receive
    weights = t * k * F32 + (t * k * es if es != F32 else 0)
    router = t * e * (es + 2 * F32)  # logits, float copy, probabilities
    lora_saved = rows * 2 * (r + ff) * es  # per expert: x@A1, pre-activation, activation, h@A2
    logits = t * v * F32
    # With a gradient-requiring input: residual, norm stats, probabilities, top-k indices,
    # top-k values and their sum, gather indices.
    routing_saved = td + stats + t * e * F32 + t * k * (I64 + F32) + t * F32 + idx

    w = _Walk()
    w.add("residual", td)
    for layer in range(dm.layers):
        # Layer 0's input needs no gradient, so its attention keeps nothing for backward.
        needs = grad and layer > 0
        w.moment(
            f"layer{layer}.attention",
            {"qkv": 3 * td, "norm_stats": stats, "attention_out": 4 * td, "lse": lse},
        )
        if needs:
            w.add("saved_activations", td + stats + 3 * td + td + lse)

        pre_saved = routing_saved if needs else 0
        # Rows are saved whenever a graph exists: the LoRA A matmuls need them.
        rows_saved = rd if grad else 0
        lora_live = lora_saved if grad else 0
        expert_ws = c * max(ff, d) * es if grad else c * max(2 * ff + r, ff + 2 * d + r) * es
        w.moment(
            f"layer{layer}.routing",
            {
                "normed": td + stats,
                "router": router,
                "topk": t * k * (I64 + 2 * F32) + t * F32,
                "weights": weights,
                "sort_indices": 5 * idx + e * I64,
                "rows": rd,
                "saved": pre_saved,
            },
        )
        common = {"saved": pre_saved + lora_live, "weights": weights, "indices": 2 * idx}
        w.moment(
            f"layer{layer}.experts",
            {**common, "rows": rd, "expert_outputs": rd, "expert_working_set": expert_ws},
        )
        w.moment(
            f"layer{layer}.combine",
            {**common, "rows": rows_saved, "expert_outputs": rd, "unsorted": rd, "out": 2 * td},
        )
        if grad:
            per_token = rd if needs else 0
            w.add(
                "saved_activations", pre_saved + rows_saved + lora_live + idx + weights + per_token
            )

    pooled = shape.batch * d * es
    w.moment(
        "head",
        {
            "normed": td + stats,
            "pooled": pooled,
            "logits": logits,
            "log_softmax": logits,
            "loss": F32,
        },
    )
    w.add("outputs", pooled + F32)
    if not grad:
        return w

    w.live["residual"] = 0  # the final residual is now saved by the final norm
    w.add("saved_activations", td + stats + logits)
    w.moment("head.backward", {"grad_nll": logits, "grad_logits": logits})
    w.add("saved_activations", -(td + stats + logits))
    w.moment("head.backward", {"grad_logits": logits, "grad_hidden": 3 * td})
    w.add("grad_residual", td)

    grads = dm.lora_bytes_per_layer()
    param_tmp = 2 * max(d, ff) * r * es
    for layer in reversed(range(dm.layers)):
        needs = layer > 0
        w.moment(
            f"layer{layer}.combine.backward",
            {"grad_per_token": rd, "grad_unsorted": 2 * rd, "grad_weights": 2 * t * k * es},
        )
        w.moment(
            f"layer{layer}.experts.backward",
            {
                "grad_routed": rd,
                "grad_rows": rd if needs else 0,
                "expert_working_set": c * (3 * ff + 2 * r + 3 * d) * es,
                "lora_grads": grads,
                "grad_temporaries": param_tmp,
            },
        )
        if needs:
            w.moment(
                f"layer{layer}.routing.backward",
                {
                    "grad_rows": 3 * rd,
                    "grad_normed": 4 * td,
                    "grad_router": t * e * (3 * F32 + es) + t * k * 3 * F32,
                    "lora_grads": grads,
                },
            )
            w.add("saved_activations", -(routing_saved + rd))
        w.add("saved_activations", -(rd + lora_saved + idx + weights))
        w.add("lora_grads", grads)
        if needs:
            w.moment(f"layer{layer}.attention.backward", {"grads": 10 * td, "lse": lse})
            w.add("saved_activations", -(td + stats + 3 * td + td + lse))
    return w


def _cuda_tensor_count(dm: Dims) -> int:
    # Live tensors at any moment: per layer the saved ones (6 attention, 13 routing, 4 per
    # expert) and 4 gradients per expert, plus per-expert lists and loose temporaries.
    return dm.layers * (19 + 8 * dm.experts) + 2 * dm.experts + 64


def cuda_scratch_bytes(dm: Dims, shape: Shape) -> int:
    """Bound on kernel scratch the caching allocator hands out on CUDA: radix sort of the
    routed rows (key/value double buffers) and attention backward row statistics."""
    rows = shape.tokens * dm.top_k
    sort = 4 * rows * I64
    attention = 2 * shape.batch * dm.heads * (-(-shape.seq // 32) * 32) * F32
    return sort + attention


def estimate(
    dims: Dims, shape: Shape, phase: Phase, device_kind: str = "cpu", *, cold_threads: int = 0
) -> MemoryEstimate:
    """Predicted reset-to-peak increment of ``phase`` at ``shape``.

    ``device_kind`` is ``"cpu"`` or ``"cuda"``. ``cold_threads`` (CUDA only) counts the
    threads that run their first matmul on the device during the phase; each adds a
    cuBLAS workspace.
    """
    if phase not in ("forward_nograd", "forward_backward"):
        raise ValueError(f"unknown phase {phase!r}")
    cuda = device_kind == "cuda"
    walk = _walk(dims, shape, phase == "forward_backward", cuda)
    terms = dict(walk.peak)
    terms["margin"] = -(-walk.peak_total // MARGIN_DIVISOR)
    if cuda:
        terms["cuda_rounding"] = CUDA_BLOCK * _cuda_tensor_count(dims)
        terms["cuda_scratch"] = cuda_scratch_bytes(dims, shape)
        if cold_threads:
            terms["cuda_cublas_workspace"] = cold_threads * cublas_workspace_bytes()
            terms["cuda_cublaslt_workspace"] = cold_threads * cublaslt_workspace_bytes()
    return MemoryEstimate(predicted_bytes=sum(terms.values()), terms=terms)


CUDA_OUTSIDE_POOL_RESERVE_BYTES = 512 * 1024 * 1024
"""Admission allowance on CUDA for device memory taken outside the caching allocator's
pool while a phase runs, which `estimate` (an increment inside the pool) does not and
cannot price: with lazy module loading (``CUDA_MODULE_LOADING=LAZY``, the default since
CUDA 11.7/12.2) a kernel's module is loaded into device memory on its first launch, so
the first phase that uses a kernel pays for it; the CUDA context grows (local memory
for kernels with larger stack frames, printf/malloc heaps); and cuBLAS, cuBLASLt and
cuDNN handles take memory of their own when first created on a thread. None of this
shows in the allocator's counters, and an allocation that finds the device full
during module loading fails as a sticky ``CUDA error: unknown error`` that poisons the
process rather than as a catchable out-of-memory error. The sizes depend on the
driver, the toolkit and which kernels the library picks, so this is a stated allowance,
not a prediction; CPU runs have nothing outside the budget and take no allowance."""


def reserve_bytes(
    free_bytes: int,
    *,
    reserve_permille: int,
    reserve_min_bytes: int,
    outside_pool_bytes: int = 0,
) -> int:
    """``max(reserve_min_bytes, free_bytes * reserve_permille // 1000) + outside_pool_bytes``.

    ``outside_pool_bytes`` is the allowance for device memory used outside the
    allocator's pool (`CUDA_OUTSIDE_POOL_RESERVE_BYTES` on CUDA, 0 on the CPU).
    """
    if outside_pool_bytes < 0:
        raise ValueError(f"outside_pool_bytes must be >= 0, got {outside_pool_bytes}")
    proportional = max(reserve_min_bytes, max(free_bytes, 0) * reserve_permille // 1000)
    return proportional + outside_pool_bytes


def admit(
    estimate_of: Callable[[Shape], MemoryEstimate],
    shape: Shape,
    free_bytes: int,
    *,
    reserve_permille: int,
    reserve_min_bytes: int,
    outside_pool_bytes: int = 0,
) -> AdmissionDecision:
    """Admit ``shape`` iff ``estimate_of(shape)`` fits ``free_bytes`` less the reserve
    (`reserve_bytes`, including the ``outside_pool_bytes`` allowance).

    A refusal suggests the fewest equal chunks of whole sequences (or, for a single
    sequence, of tokens) whose estimate fits, or says that none does.
    """
    reserve = reserve_bytes(
        free_bytes,
        reserve_permille=reserve_permille,
        reserve_min_bytes=reserve_min_bytes,
        outside_pool_bytes=outside_pool_bytes,
    )
    usable = free_bytes - reserve
    predicted = estimate_of(shape).predicted_bytes
    if predicted <= usable:
        return AdmissionDecision(
            admitted=True, predicted_bytes=predicted, usable_bytes=usable, reserve_bytes=reserve
        )
    return AdmissionDecision(
        admitted=False,
        predicted_bytes=predicted,
        usable_bytes=usable,
        reserve_bytes=reserve,
        suggestion=_suggest(estimate_of, shape, usable),
    )


def _largest_fitting(fits: Callable[[int], bool], high: int) -> int:
    """Largest n in [1, high] with fits(n) (fits is monotone decreasing), or 0."""
    low = 0
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def _suggest(estimate_of: Callable[[Shape], MemoryEstimate], shape: Shape, usable: int) -> str:
    def predicted(batch: int, seq: int) -> int:
        return estimate_of(Shape(batch=batch, seq=seq)).predicted_bytes

    per = _largest_fitting(lambda b: predicted(b, shape.seq) <= usable, shape.batch - 1)
    if per:
        n = -(-shape.batch // per)
        return (
            f"split into {n} chunks of {per} sequences ({per * shape.seq} tokens each, "
            f"predicted {predicted(per, shape.seq)} bytes)"
        )
    per = _largest_fitting(lambda s: predicted(1, s) <= usable, shape.seq - 1)
    if per:
        n = shape.batch * -(-shape.seq // per)
        return f"split into {n} chunks of {per} tokens (predicted {predicted(1, per)} bytes each)"
    return (
        f"no split fits: a single token is predicted at {predicted(1, 1)} bytes, usable is {usable}"
    )
